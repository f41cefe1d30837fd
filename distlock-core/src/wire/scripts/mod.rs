//! The wire protocol: every request distlock sends to Redis, each as one typed call that places
//! its keys and arguments and decodes its reply into an enum. **Not public API**: the Lua
//! sources are visible (doc-hidden) only for the repository's tests and benchmarks.
//!
//! ## Protocol `d2`
//!
//! A lock is one string key, `prefix:{name}`, holding `d2:<owner>` (the protocol version, then
//! the acquisition's owner id) with the lease as its expiry. Everything else is on the client:
//! re-entrant holds are counted in the task chain that holds the lock (`context`), so a
//! re-entry neither writes a hold to Redis nor needs one released.
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
//!   the message is `1`, a wake (`grant_prelude!`). A release may also queue the releasing
//!   client's next waiter for the lock, with that waiter's ticket (`NextWaiter`: a waiter that
//!   waits in the client, `client::waiting::cohort`), before it lets go, so that waiter sends no attempt
//!   of its own. Releases that arrive together go out as one
//!   `RELEASE_MANY` call (`ReleaseManyCall`), and acquires that arrive together share one
//!   pipeline and one `ECHO` (see `batch`). The queue is a key next to a `d2` lock that changes
//!   nothing in it: a client that does not know it still excludes correctly (it deletes and
//!   wakes, and its waiters retry), so the version tag stays `d2`.
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
//! instead of a count. Next to it, `prefix:{name}:writer` holds the value of a writer waiting
//! for the readers (its intent), with a short expiry (`WRITER_INTENT`, 1 s) that the writer renews
//! at each attempt.
//!
//! * **Read acquire** (`SharedAcquireCall` with `Shared::Read`, `ACQUIRE_READ`): a share if no
//!   writer holds the lock (a `d2` string) and no writer's intent lives; a replay finds our
//!   member and extends it. Fenced, the token comes from the lock's fence floor.
//! * **Write acquire**: a lock's plain or fenced acquire; one that meets readers (`WRONGTYPE`,
//!   or the fenced script's "not a string") is sent again as `ACQUIRE_WRITE`
//!   (`SharedAcquireCall` with `Shared::Write`), and so is every later attempt of that acquire:
//!   busy while readers live, a waiting writer marks its intent (so no new reader enters:
//!   writers do not starve) and takes the lock when the last reader left, removing its intent.
//! * **Renewal, release**: `RENEW`, `RELEASE` and `RELEASE_MANY`, as for a permit (a key that
//!   is not a string is a set of holders, `permit_prelude!`); a reader's release publishes.
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
//! One file per family, each constant re-exported here: `lock` (the fenced acquire, the
//! release of one lock or many), `handoff` (a waiter's turn where a release hands the lock
//! over: `ACQUIRE_HANDED`, `LEAVE_QUEUE`, the grant window and ticket), `redlock` (the queued
//! acquire and the fence floor), `shared` (a permit, a read, a write that met readers), `sets`
//! (`ACQUIRE_ALL`) and `renew` (`RENEW`). The Lua functions several scripts share are the
//! preludes below (macros, so that `concat!` makes each script one constant string; defined
//! before the files, so each file can use them).

/// The protocol version every lock value starts with.
pub const VERSION_TAG: &str = "d2:";

/// The member of a semaphore's sorted set that holds its permit count (as the score `-n`).
pub const PERMITS_MEMBER: &str = "d2:permits";

/// The Lua functions on a semaphore's or readers' sorted set shared by [`ACQUIRE_PERMIT`],
/// [`ACQUIRE_READ`], [`RENEW`], [`RELEASE`], [`RELEASE_MANY`] and [`LEAVE_QUEUE`] (a macro, so that `concat!`
/// makes each script one constant string). Deadlines are the server's clock in ms; the count member's score is `-n`, below
/// every deadline. The lock scripts define them inside their branch for a key that is not a
/// string, so a lock's renewal and release never pay for making them.
macro_rules! permit_prelude {
    () => {
        r#"
local function permit_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function permit_count(key)
  if redis.call('TYPE', key)['ok'] ~= 'zset' then
    return nil
  end
  local n = redis.call('ZSCORE', key, 'd2:permits')
  if not n then
    return nil
  end
  return -tonumber(n)
end
local function permit_settle(key, now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local at = tonumber(last[2] or '0')
  if at <= now then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, string.format('%d', at - now))
  end
end
local function permit_set(key)
  if redis.call('TYPE', key)['ok'] ~= 'zset' then
    return false
  end
  return redis.call('ZSCORE', key, 'd2:permits') or redis.call('ZSCORE', key, 'd2:readers')
end
local function permit_renew(key, value, ttl)
  if not permit_set(key) then
    return -2
  end
  local now = permit_now()
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local s = redis.call('ZSCORE', key, value)
  if s then
    redis.call('ZADD', key, 'GT', string.format('%d', now + tonumber(ttl)), value)
  end
  permit_settle(key, now)
  if s then
    return 1
  end
  return 0
end
"#
    };
}

/// How a lock is let go, shared by [`RELEASE`], [`RELEASE_MANY`], [`LEAVE_QUEUE`] and
/// [`ACQUIRE_HANDED`] (a macro, so that `concat!` makes each script one constant string).
///
/// `let_go`: with the lock's queue given (one server, Sentinel, a cluster; not over RedLock),
/// the lock is handed in place to the first waiter queued for it: set to its value for its
/// grant window (read from its ticket, see `handed_ticket`; its new holder extends it to its
/// ttl), the entry removed, and the message names it and the request that last queued it
/// (`<value> <request id>`, from `queue:ids`: the waiter trusts the grant from that request's
/// send only, since a message can reach it after a later attempt of its own found the lock
/// another's); otherwise the lock is deleted and the message is `1`, a plain wake. Without
/// waiters this costs one `ZRANGE`. `grant`: the first waiter's entry taken out and the
/// message that names it (a permit handed over, `permit_handoff_prelude!`, sends the same);
/// `wake`: a message alone.
///
/// `release_lock`: a `d2` lock's release (`v`: what the lock key holds, `false` if nothing),
/// as [`RELEASE`] returns its code. With a next waiter (`nv`, its ticket `nt` and the id `nid`
/// its grant will name: a waiter of the releasing client that waits in the client behind one
/// already queued, see `client::waiting::cohort`) the release queues it first (unless the lock
/// is that waiter's already: it took it by an attempt of its own), whatever else it finds, and
/// keeps the queue keys for the lock's pttl and that waiter's window: a lock found free is then handed to
/// the first waiter at once, as [`ACQUIRE_HANDED`] would, and the waiter sends no attempt of
/// its own.
macro_rules! grant_prelude {
    () => {
        r#"
local function wake(chan, msg, sharded)
  if sharded then
    redis.call('SPUBLISH', chan, msg)
  else
    redis.call('PUBLISH', chan, msg)
  end
end
local function grant(chan, q, ids, first, sharded)
  redis.call('ZREM', q, first[1])
  local id = redis.call('HGET', ids, first[1])
  if id then
    redis.call('HDEL', ids, first[1])
    wake(chan, first[1] .. ' ' .. id, sharded)
  else
    wake(chan, first[1], sharded)
  end
  return math.max(tonumber(first[2]) % 1024, 1)
end
local function hand_over(lock, chan, q, ids, first, sharded)
  local window = grant(chan, q, ids, first, sharded)
  redis.call('SET', lock, first[1], 'PX', string.format('%d', window))
  return window
end
local function let_go(lock, chan, q, ids, sharded)
  if q then
    local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    if first[1] then
      hand_over(lock, chan, q, ids, first, sharded)
      return
    end
  end
  redis.call('DEL', lock)
  wake(chan, '1', sharded)
end
local function release_lock(lock, chan, q, ids, v, value, keep, nv, nt, nid, sharded)
  if v and v ~= value and string.sub(v, 1, 3) ~= 'd2:' then
    return -3
  end
  if nv and v ~= nv then
    redis.call('ZADD', q, nt, nv)
    redis.call('HSET', ids, nv, nid)
  end
  local code = 0
  if v == false then
    code = -2
  elseif v ~= value then
    code = -1
  elseif tonumber(keep) > 0 then
    redis.call('PEXPIRE', lock, keep)
  end
  if (code == 0 and tonumber(keep) <= 0) or (code == -2 and nv) then
    let_go(lock, chan, q, ids, sharded)
  end
  if nv then
    local left = math.max(redis.call('PTTL', lock), 0) + math.max(tonumber(nt) % 1024, 1)
    if redis.call('PTTL', q) < left then
      redis.call('PEXPIRE', q, left)
    end
    if redis.call('PTTL', ids) < left then
      redis.call('PEXPIRE', ids, left)
    end
  end
  return code
end
"#
    };
}

/// A permit let go, and handed over (a macro, so that `concat!` makes each script one
/// constant string; after [`grant_prelude!`] and [`permit_prelude!`], whose functions it uses),
/// shared by [`ACQUIRE_PERMIT`], [`RELEASE`], [`RELEASE_MANY`] and [`LEAVE_QUEUE`].
///
/// `permit_hand`: with the semaphore's queue given (one server, Sentinel, a cluster), every free
/// permit of the semaphore `key` of `n` (expired holders already removed) is handed to the
/// waiters queued for it in their order (those with a ticket below `below`, if given: an
/// acquire hands the permits to the waiters ahead of it): each becomes a holder for its grant
/// window (read from its ticket, as a lock's), and the message names it and the request that
/// queued it (`grant`). The new holder trusts it for that window, or confirms it with one more
/// attempt, which finds it its own and extends it to the ttl (see [`ACQUIRE_PERMIT`]). Returns the permits still
/// free and how many were handed. A handed member never replaces a live one (`NX`).
///
/// `permit_release`: a permit's or a read hold's release (`keep` ms > 0: kept for `min_hold`
/// instead): -3 not a `d2` set of holders, -2 not held (nothing changed), 1 kept, 0 let go. A
/// permit let go is handed to the first waiter queued for it (`q` given); otherwise, or with
/// permits still free after that, or for a read hold, the release channel gets `1`, a wake.
macro_rules! permit_handoff_prelude {
    () => {
        r#"
local function permit_hand(key, chan, q, ids, now, n, below, sharded)
  local held = redis.call('ZCARD', key)
  if held > 0 then
    held = held - 1
  end
  local free, handed = n - held, 0
  while free > 0 do
    local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    if not first[1] or (below and tonumber(first[2]) >= below) then
      break
    end
    local window = grant(chan, q, ids, first, sharded)
    redis.call('ZADD', key, string.format('%d', -n), 'd2:permits')
    redis.call('ZADD', key, 'NX', string.format('%d', now + window), first[1])
    free, handed = free - 1, handed + 1
  end
  return free, handed
end
local function permit_release(key, value, keep, chan, q, ids, sharded)
  if not permit_set(key) then
    return -3
  end
  local now = permit_now()
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local code = -2
  if redis.call('ZSCORE', key, value) then
    if tonumber(keep) > 0 then
      redis.call('ZADD', key, 'XX', string.format('%d', now + tonumber(keep)), value)
      code = 1
    else
      redis.call('ZREM', key, value)
      code = 0
    end
  end
  if code == 0 then
    local n, free, handed = permit_count(key), 1, 0
    if n and q then
      free, handed = permit_hand(key, chan, q, ids, now, n, nil, sharded)
    end
    if handed == 0 or free > 0 then
      wake(chan, '1', sharded)
    end
  end
  permit_settle(key, now)
  return code
end
"#
    };
}

/// The fence raise shared by [`ACQUIRE_FENCED`], [`ACQUIRE_PERMIT`], [`ACQUIRE_READ`] and
/// [`ACQUIRE_HANDED`] (a macro, so that `concat!` makes each script one constant string): with a
/// retention above 0, the token is the server's time in µs, or one above the fence key's last token
/// if that is not below it, and the key keeps it for the retention; a key that does not hold a
/// number is left as it was and reported (`bad`). A retention of 0: no token (0).
macro_rules! fence_prelude {
    () => {
        r#"
local function fence_raise(key, retention)
  if tonumber(retention) <= 0 then
    return 0, false
  end
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local prev = redis.call('SET', key, string.format('%d', token), 'PX', retention, 'GET')
  local last = tonumber(prev or '0')
  if last == nil then
    redis.call('SET', key, prev, 'PX', retention)
    return 0, true
  end
  if token <= last then
    token = last + 1
    redis.call('SET', key, string.format('%d', token), 'PX', retention)
  end
  return token, false
end
"#
    };
}

mod handoff;
mod lock;
mod redlock;
mod renew;
mod sets;
mod shared;

pub(crate) use handoff::{grant_window, handed_ticket};
pub use handoff::{ACQUIRE_HANDED, LEAVE_QUEUE};
pub use lock::{ACQUIRE_FENCED, RELEASE, RELEASE_MANY};
pub(crate) use redlock::TURN_GRACE;
pub use redlock::{ACQUIRE_QUEUED, FENCE_FLOOR};
pub use renew::RENEW;
pub use sets::ACQUIRE_ALL;
pub(crate) use shared::WRITER_INTENT;
pub use shared::{ACQUIRE_PERMIT, ACQUIRE_READ, ACQUIRE_WRITE};
