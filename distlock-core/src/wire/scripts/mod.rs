//! The wire protocol: every request distlock sends to Redis, each as one typed call that places
//! its keys and arguments and decodes its reply into an enum. **Not public API**: the Lua
//! sources are visible (doc-hidden) only for the repository's tests and benchmarks.
//!
//! ## Protocol `d2`
//!
//! A lock is one string key, `prefix:{name}`, holding `d2:<owner>` (the protocol version, then
//! the acquisition's owner id) with the lease as its expiry; `d2:<owner>+` while someone waits
//! for it (the waiters' mark, `marks_prelude!`: as a futex holds "locked, with waiters").
//! Everything else is on the client: re-entrant holds are counted in the task chain that holds
//! the lock (`context`), so a re-entry neither writes a hold to Redis nor needs one released.
//!
//! * **Acquire** (`AcquireCall`): `SET lock d2:<owner> NX PX ttl GET` and `ECHO <request id>`
//!   pipelined: no Lua. The reply says fresh (nil), replay of our own acquire after a lost reply
//!   (our own value) or busy (another value); `PTTL` joins the pipeline when the caller waits.
//! * **Fenced acquire** (`FencedAcquireCall`, for locks that ask for a fencing token): one
//!   script that also raises the fence floor (`ACQUIRE_FENCED`).
//! * **RedLock acquire** (`QueuedAcquireCall`, over a RedLock quorum only, plain or fenced):
//!   one script (`ACQUIRE_QUEUED`) that takes a free lock only in its waiters' order, kept in
//!   two sorted sets next to the lock (`prefix:{name}:queue`: lock value → ticket;
//!   `:queue:until`: lock value → when the entry lapses), which expire with their last entry.
//!   A waiter that leaves without the lock takes its entry out (`LeaveQueueCall`,
//!   `LEAVE_QUEUE`). They add keys next to a `d2` lock and change nothing in it: a client that
//!   does not know them still excludes correctly (it only does not wait its turn), so the
//!   version tag stays `d2`. One server, a cluster and Sentinel never see them.
//! * **A waiter's attempt** (`HandedAcquireCall`, `ACQUIRE_HANDED`; one server, Sentinel, a
//!   cluster: a plain lock's waiter once it subscribed): queues the caller in
//!   `prefix:{name}:queue` (a sorted set: lock value → ticket, the caller's start and grant
//!   window in one score, `handed_ticket`) while the lock is held, records the request that
//!   queued it (`prefix:{name}:queue:ids`, a hash: lock value → request id), and takes a free
//!   lock only in the queue's order.
//! * **Re-entry check** (`RenewCall` with one lease): the outer hold is still ours, and its
//!   expiry reaches at least the inner hold's ttl.
//! * **Release** (`ReleaseCall`, `RELEASE`): compare, then let go: on one server, Sentinel and
//!   a cluster the lock is handed to the first waiter of its queue in place (set to that
//!   waiter's value for its grant window, which its new holder extends) and the message on the
//!   release channel names it and the request that last queued it (`<value> <request id>`:
//!   the waiter trusts the grant from that request's send only); with nobody queued (and over RedLock) the lock is deleted and
//!   the message is `1`, a wake (`grant_prelude!`). A lock nobody marked is deleted and
//!   nothing more (no queue read, no message: an uncontended release costs Redis a `GET` and a
//!   `DEL`): every waiter marks the lock it waits for (a waiter's attempt that queues it, a
//!   set's, a reader's or a writer's that finds it held; a leader's proclaim, for its
//!   observers), and a lock handed over is set marked. Only a hold taken by a newcomer's first
//!   attempt past waiters queued at a lock an expiry freed is unmarked with waiters queued: its
//!   release deletes it, and they find it free at their own look again, due at that expiry.
//!   A release may also queue the releasing
//!   client's next waiter for the lock, with that waiter's ticket (`NextWaiter`: a waiter that
//!   waits in the client, `client::waiting::cohort`), before it lets go, so that waiter sends no attempt
//!   of its own. Releases that arrive together go out as one
//!   `RELEASE_MANY` call (`ReleaseManyCall`), and acquires that arrive together share one
//!   pipeline and one `ECHO` (see `batch`). The queue is a key next to a `d2` lock that changes
//!   nothing in it. The mark is in the lock's value: a client that did not know it would read
//!   its own marked lock as another's (its renewal and release refused: told `Lost`, the lock
//!   left to expire), so it is part of `d2` from the first release on (no published version
//!   lacks it).
//! * **Renewal** (`RenewCall`, `RENEW`): compare and extend, batched.
//!
//! ### Permits (`distlock::semaphore(name, n)`)
//!
//! A semaphore of `n` permits lies at the same key, `prefix:{name}`, as a sorted set: one
//! member per holder (its lock value, `d2:<owner>`) scored by its lease deadline in the
//! server's clock (ms, `TIME`), and the member `d2:permits` scored `-n` (the agreed count, and
//! the mark of a `d2` semaphore). Every script that touches it removes the holders whose
//! deadline passed first (no sweeper: the set never holds more than `n` live holders plus
//! those expired since the last call), and sets the key's own expiry to the latest deadline
//! (so a semaphore nobody holds is gone); the last holder's release deletes it.
//!
//! * **Acquire** (`SharedAcquireCall` with `Shared::Permits`, `ACQUIRE_PERMIT`): a permit if
//!   fewer than `n` live holders; a replay of our own take after a lost reply finds our member
//!   and extends it; another `n` while holders live is refused (`Error::PermitsMismatch`),
//!   never a resize.
//!   Fenced, the token comes from the same fence floor as a lock's (a replay gets a fresh one,
//!   still above every earlier token).
//! * **A waiter in its turn** (one server, Sentinel, a cluster: `ACQUIRE_PERMIT` with the
//!   queue keys): queues as a lock's waiter does (`prefix:{name}:queue`, `:queue:ids`), takes
//!   a free permit only after the waiters queued ahead of it were handed one, and is handed a
//!   permit by a release (a member for its grant window, the message `<value> <request id>`:
//!   `permit_handoff_prelude!`), trusted or confirmed as a lock's grant (`ACQUIRE_HANDED`).
//! * **Renewal, release**: `RENEW`, `RELEASE` and `RELEASE_MANY` take a permit's key in the
//!   same place as a lock's (a key that is not a string is looked at as a semaphore:
//!   `permit_prelude!`), so the watchdog's batches, the re-entry check, the group commit and the
//!   Sentinel confirmations serve both kinds unchanged. A release hands the permit to the first
//!   waiter queued for it, or publishes `1` on the release channel.
//!
//! ### Shared holds (`distlock::lock(name).read()`)
//!
//! Readers lie at the lock key too, as a sorted set like a semaphore's (one member per reader
//! scored by its lease deadline, expired readers removed by every script that touches it, the
//! key's expiry kept at the latest deadline), marked by the member `d2:readers` scored `-1`
//! instead of a count.
//!
//! **In one line** (one server, Sentinel, a cluster): readers and writers wait in the lock's
//! queue (`prefix:{name}:queue`; a reader's request id recorded as `r:<id>` in `queue:ids`), and
//! every release turns the lock over to the head of the line (`turn_over`): a writer's release
//! to the next writer, or to every reader at the head together (a share each, for its grant
//! window); the last reader's release to a writer queued behind. A writer waiting behind
//! readers asks again at least every 500 ms and its entry lapses 2 s after its last attempt
//! (`prefix:{name}:queue:until`), so one whose process died holds new readers up for 2 s at
//! most.
//!
//! * **Read acquire** (`SharedAcquireCall` with `Shared::Read`, `ACQUIRE_READ`): a share if no
//!   writer holds the lock (a `d2` string), no writer queued ahead waits for it and no writer's
//!   intent lives; a replay, or a share handed over, finds our member and extends it. Fenced,
//!   the token comes from the lock's fence floor.
//! * **Write acquire**: a lock's plain or fenced acquire; a waiter's queued attempts
//!   (`ACQUIRE_HANDED`) queue behind readers like behind a writer. Elsewhere (a writer that does
//!   not wait, or over RedLock) one that meets readers (`WRONGTYPE`, or the fenced script's
//!   "not a string") is sent again as `ACQUIRE_WRITE` (`SharedAcquireCall` with
//!   `Shared::Write`), and so is every later attempt of that acquire: busy while readers live,
//!   a waiting writer marks its intent (`prefix:{name}:writer`, `WRITER_INTENT`, 1 s, renewed at
//!   each attempt: no new reader enters, writers do not starve) and takes the lock when the
//!   last reader left, removing its intent.
//! * **Renewal, release**: `RENEW`, `RELEASE` and `RELEASE_MANY`, as for a permit (a key that
//!   is not a string is a set of holders, `permit_prelude!`); a reader's release turns the lock
//!   over to the line, or publishes.
//!
//! A semaphore and a set of readers of one name are incompatible with each other, as is a
//! distlock of an earlier protocol (its `SET ... GET` meets `WRONGTYPE`).
//!
//! The kinds exclude each other: a lock's `SET ... GET` on a semaphore's key is `WRONGTYPE`,
//! and a semaphore's acquire on a lock's key finds a string; both report it as incompatible,
//! as does a distlock of an earlier protocol.
//!
//! ### Sets of locks (`distlock::lock_all([a, b])`)
//!
//! A set taken together is nothing new in Redis: each of its locks is an ordinary `d2` lock (one
//! string key per name, `d2:<owner>`), all with the set's one value and the same expiry, so every
//! client of this protocol (and the CLI) sees each of them as the lock it is. Nothing is added to
//! the stored layout: the version tag stays `d2`.
//!
//! * **Acquire** (`SetAcquireCall`, `ACQUIRE_ALL`): every key checked, then all set, or none
//!   (busy at the first lock held by another owner or by readers; incompatible at the first
//!   key that is neither). On one server, Sentinel and each RedLock master the whole set is one
//!   call; in a cluster one call per hash slot, in a fixed order (see `lock::kind::set`). A
//!   waiter in its turn (the whole set one call, not over RedLock) queues at the lock it finds
//!   held (that lock's `:queue` and `:queue:ids`, as a lock's waiter) and is handed that lock
//!   by its release; its next attempt takes the set or gives the lock back.
//! * **Renewal**: `RENEW`, one item per lock (the watchdog's batches, the re-entry check).
//! * **Release** (`SetReleaseCall`): `RELEASE_MANY` over the set's locks (per hash slot in a
//!   cluster), each compared and deleted on its own, and published.
//!
//! A lock that asks for replica acknowledgement (`min_replicas`) gets `WAIT n timeout` after its
//! acquire or renewal in the same pipeline, so it runs on the connection (and, in a cluster, the
//! node) that wrote.
//!
//! Every reply answers with the request's id, so a reply that answers another request (a reply
//! lost on a connection that stayed open) is recognised. A key that holds anything else than a
//! `d2` lock (a lock of another distlock version, another program's key) is never misread: the
//! calls report it as incompatible.
//!
//! ## Where each script lies
//!
//! One file per family, named as its calls' file in `wire::calls`, each constant re-exported
//! here: `lock` (a lock's: the fenced acquire, RedLock's queued acquire, a waiter's turn where
//! a release hands the lock over, `ACQUIRE_HANDED`, `LEAVE_QUEUE`, the grant window and
//! ticket; the release of one lock or many), `shared` (a permit, a read, a write that met
//! readers), `set` (`ACQUIRE_ALL`), `renew` (`RENEW`), `fence_floor` (`FENCE_FLOOR`, RedLock's
//! fencing token rounds), `leader` (an election's record and candidates), and two that are not
//! a lock's: `store` (`FENCED_WRITE`, `fence::redis`: a fenced write checked against its lock's
//! watermark, or a claim raising it) and `identity` (`CLIENT_RECORD`, a client's identity
//! record). The Lua functions several scripts share are the preludes below (macros, so that
//! `concat!` makes each script one constant string; defined before the files, so each file can
//! use them).

/// The protocol version every lock value starts with.
pub const VERSION_TAG: &str = "d2:";

/// What a lock's waiters append to its value (`d2:<owner>+`, `marks_prelude!`): the owner is
/// the value without it.
pub const WAITERS_MARK: char = '+';

/// The member of a semaphore's sorted set that holds its permit count (as the score `-n`).
pub const PERMITS_MEMBER: &str = "d2:permits";

#[macro_use]
mod preludes;

mod fence_floor;
mod identity;
mod leader;
mod lock;
mod renew;
mod set;
mod shared;
mod store;

pub use fence_floor::FENCE_FLOOR;
pub use identity::CLIENT_RECORD;
pub use leader::{
    LEADER_CANDIDATE, LEADER_CANDIDATES, LEADER_CURRENT, LEADER_PROCLAIM, TERMS_KEPT,
};
pub(crate) use lock::{entry_life, grant_window, handed_ticket, TURN_GRACE};
pub use lock::{
    ACQUIRE_FENCED, ACQUIRE_HANDED, ACQUIRE_QUEUED, LEAVE_QUEUE, RELEASE, RELEASE_MANY,
};
pub use renew::RENEW;
pub use set::ACQUIRE_ALL;
pub(crate) use shared::WRITER_INTENT;
pub use shared::{ACQUIRE_PERMIT, ACQUIRE_READ, ACQUIRE_WRITE};
pub use store::FENCED_WRITE;
