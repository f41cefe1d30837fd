//! # distlock-core
//!
//! The runtime behind [`distlock`](https://docs.rs/distlock): the Redis wire protocol, the global
//! client registry, lock guards, lease renewal (the watchdog), waiting, and errors. Most users
//! depend on the `distlock` facade and write `#[distributed_lock(...)]`; the manual API here is
//! re-exported there too.
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock_core::Error> {
//! use std::time::Duration;
//! distlock_core::init("redis://127.0.0.1:6379/").await?;
//! let guard = distlock_core::lock("order:42")
//!     .ttl(Duration::from_secs(10))
//!     .renew(true)
//!     .wait(Duration::from_secs(2))
//!     .fenced(true) // hand out a fencing token
//!     .acquire()
//!     .await?;
//! let token = guard.token().expect("fenced"); // hand this to the resource you protect
//! # let _ = token;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## What a lock guarantees
//!
//! * **Atomic acquire with an owner.** One `SET key d2:<owner> NX PX ttl GET` takes the lock and
//!   sets its ttl in the same step (never `SETNX` then `EXPIRE`), with no script on the common
//!   path. The owner is 128 random bits of the client plus a counter; only the owner can release
//!   or renew. The value starts with the protocol version (`d2:`): a key written by another
//!   distlock version or another program is reported as [`Error::Incompatible`], never misread.
//! * **Re-entry.** Inside a body run under a lock ([`LockBuilder::run`] or the attribute), taking
//!   the same name through the same client again re-enters: holds are counted in the call chain,
//!   on the client, and the lock stays held in Redis until the last hold is released. Each
//!   re-entry makes one owner-checked round trip that extends (never shortens) the expiry to its
//!   own ttl and fails with [`Error::Lost`] if the outer hold is gone. A task spawned inside the
//!   body is a different owner and waits like anyone else.
//! * **Idempotent retries.** An acquire retried after its reply was lost reads back its own
//!   value (`SET ... GET`) and knows it holds the lock; a release retried after its reply was
//!   lost finds the lock gone and knows the first attempt freed it. Every reply echoes its
//!   request's id, so a reply lost on a connection that stayed open is noticed, never taken for
//!   another request's.
//! * **Renewal.** With `renew(true)` a per-client watchdog extends the lease every ttl/3, in
//!   batches (one script call renews up to [`Config::renew_batch_size`] leases). It stops the
//!   moment the guard is released or dropped. Renewal (and re-entry) only ever *extends* the
//!   key's expiry, so a short inner hold never shortens a longer outer one, and a hold's own
//!   deadline is never later than the key's expiry. A key that is not a lock any more (someone
//!   overwrote it) fails only its own lease, not the rest of its batch.
//! * **Loss is an event.** When renewal finds the lock gone or taken, Redis stays unreachable
//!   or keeps refusing renewal until the lease could have run out, or the process stalls past
//!   it, [`LockGuard::lost`] resolves and [`LockGuard::ensure_held`] fails. A lease is
//!   considered guaranteed until `ttl - (`[`LEASE_MARGIN`]` + ttl/100)` after the acquire (or
//!   renewal) command was *sent*: the fixed 5 ms covers timer rounding and scheduling, the 1%
//!   clock-rate differences. Leases are [`MIN_TTL`] (100 ms) to [`MAX_TTL`] (30 days); other
//!   durations (`wait`, `max_hold`, timeouts) saturate, so `Duration::MAX` means forever.
//! * **`Ok` means exclusive.** [`LockBuilder::run`] (and so the attribute) returns `Ok` only if
//!   the body completed inside its lease with no loss reported while it ran; otherwise
//!   [`Error::Lost`] (a body whose lease ran out before its first poll never starts). The result
//!   is decided when the body completes: `run` then sends the release (queued on the command
//!   connection, ahead of anything the client sends next) and returns without waiting for its
//!   answer, which is handled off the caller's path (by the task that sends it; a failure on the
//!   client's runtime: retried within the lease, reported
//!   through tracing and `distlock_sent_releases_total`; the lock expires at its ttl in any
//!   case). Over a RedLock quorum `run` waits for the release until the lease's end at most,
//!   and an answer by then that finds the lock not ours is [`Error::Lost`].
//!   [`LockGuard::release`] returns `Ok` only if the lease was never lost and Redis found the
//!   hold still ours ([`Error::Lost`] or [`Error::NotOwner`] otherwise). A re-entry never
//!   re-creates a lock that vanished under its outer hold: it fails with [`Error::Lost`] and
//!   marks the outer hold lost too.
//! * **Independent of the caller's runtime.** Each client runs its connections, the watchdog
//!   and its cleanup tasks on a runtime thread of its own, so they do not die with the runtime
//!   that called [`init`] (in `#[tokio::test]`, every test has its own).
//! * **Waiting without polling.** A waiter subscribes to the lock's release channel (one shared
//!   RESP3 subscriber connection per client); the release script publishes there. It also looks
//!   again when the holder's remaining ttl runs out, because a crashed holder never publishes.
//!   Transient failures (a reset connection, a timeout, `NoQuorum`, `LOADING`, `READONLY`
//!   during a failover, …; [`Error::is_transient`]) do not end a wait: the waiter tries again
//!   after a short randomised pause (15 ms doubling to 200 ms) until its wait runs out, then
//!   returns the last error (or [`Error::Busy`] if the last attempt found the lock held).
//! * **Handed over in turn** (one server, Sentinel, a Redis Cluster). A plain lock's waiters
//!   queue in Redis next to the lock (`prefix:{name}:queue`, same hash slot), and a release
//!   hands the lock in place to the first of them, naming it in its message: the next holder
//!   starts on that message, with no acquire round trip, and the waiters of every client and
//!   process take their turns in the order they came (except at a lock an expiry freed: no
//!   release hands it on, and a newcomer's first attempt can take it before the queued waiters
//!   look again, within the holder's remaining ttl, at most 1 s; `docs/protocol.md`). A
//!   client's waiters of one lock behind one
//!   of them already queued wait in the client, and the client's own release of the lock
//!   queues the next of them in Redis with its ticket (one script per handoff between its tasks;
//!   [`Client::waiting_in_client`] counts them). A handed lock is the waiter's for its
//!   grant window (1 s, or the ttl if shorter) counted from its last attempt that found the
//!   lock held (the grant came after it), and the watchdog extends it to the ttl early in that
//!   window; a grant heard too late to trust costs one more round trip, which finds the lock
//!   ours and extends it. A waiter that leaves lets go a lock handed to it meanwhile, and one
//!   whose process died costs the lock its window at most, never its ttl (a waiter looks again
//!   at least every second while it waits). **The waiters of a killed process cost the living
//!   one window in all**, whatever their number: each queue entry carries its lapse (its
//!   waiter's wait's end, and 3 s after its last look at most: a live waiter's looks renew it,
//!   and a waiter whose wait ended is never handed the hold, even if its process is gone), a
//!   grant skips lapsed entries, and a hold found free while the record of its grant is still
//!   there lapsed in a gone client's hands: that client's other entries leave the queue at once
//!   (so 10 killed waiters of a lock cost a live waiter behind them 1.0 s, not 10; 20 of a
//!   semaphore of 4, 1.0 s, not 5: `tests/crashed_waiters.rs`, RELIABILITY.md). A paused
//!   (`SIGSTOP`) process's waiters cost the others, while it is stopped, what a killed one's
//!   cost: to Redis both are silent, so nobody renews their entries and a grant that lapses in
//!   their hands takes their client for gone (one window per lock, nothing once their entries
//!   lapsed). Once it resumes, its waiters are not lost: each looks again and queues anew with
//!   the ticket it came with. Fenced waiters and waiters that ask for replicas
//!   are handed the lock the same way but confirm the grant with one more attempt, which finds
//!   the lock theirs and raises its fencing token (or waits for its replicas) then. A
//!   semaphore's waiters queue the same way (`prefix:{name}:queue`): a release hands the permit
//!   it frees to the first of them (a holder for its grant window, on the lock's terms: trusted
//!   and extended by the watchdog, or confirmed by a fenced or replicated waiter); permits
//!   freed by a lease that ran out reach the queued waiters in their order too. A set's waiters
//!   queue at the lock they find held and are handed it; their next attempt takes the whole set
//!   or gives that lock back and queues at the lock now held (a set never waits holding part of
//!   itself). Readers and writers wait in one line (see "shared holds" below).
//!   Sets over several cluster hash slots and RedLock are woken and try again instead.
//! * **Cancellation safety.** Dropping an `acquire()` future, a `release()` future or a guard
//!   never leaves the lock held until its ttl: the release runs in the background on the
//!   client's own runtime thread.
//! * **Bounded waits on Redis.** Every call is bounded by [`Config::response_timeout`]; the
//!   connection reconnects by itself after Redis restarts.
//!
//! ## What a semaphore's permit guarantees
//!
//! [`semaphore`]`(name, n)` is a lock of another kind, taken through the same builder, guard,
//! `run`, watchdog and waiters, and every guarantee above holds **per permit**: at most `n` holders
//! at once while each believes it holds; each permit is its own lease in Redis (a sorted set of the
//! holders scored by their deadlines, at the lock's key), so a crashed holder frees its permit at
//! its own ttl and never resets the others; renewal extends only a live permit; loss (the permit
//! expired, was removed, or could not be renewed in time) cancels the body and reports
//! [`Error::Lost`]; release on every exit path, publishing on the release channel so a waiter takes
//! the freed permit; a replayed acquire after a lost reply finds its own permit; fencing tokens
//! strictly increase per name across all holders. Expired holders are removed by the scripts
//! themselves (no sweeper), and the key expires with its latest lease. Everyone using a name agrees
//! on `n` ([`Error::PermitsMismatch`] names both counts; the count is checked against the live
//! holders, never resized), and a lock and a semaphore of one name exclude each other
//! ([`Error::Incompatible`]). Over [`Config::redlock`] semaphores are refused
//! ([`Error::InvalidConfig`]) until they are built there.
//!
//! ## What a shared (read) hold guarantees
//!
//! [`LockBuilder::read`] takes a shared hold of a lock: every guarantee above holds **per read
//! hold**, with the lock itself as the write. While a reader believes it holds, no writer does;
//! while a writer believes it holds, nobody else holds anything of the name. Readers lie at the
//! lock's key as a sorted set like a semaphore's (each reader its own lease: a crashed reader
//! frees its share at its own ttl; expired readers removed by the scripts, no sweeper); renewal
//! extends only a live share; loss cancels the body and reports [`Error::Lost`]; a release
//! wakes waiters; fencing tokens strictly increase per name across readers and writers. A
//! writer meeting readers (or a reader meeting a writer) is busy, never incompatible. Readers
//! and writers wait in one line (one server, Sentinel, a cluster): a writer's release hands the
//! lock to the next writer or to every reader at the head of the line together, the last
//! reader's release to a writer queued behind, and no new reader enters past a writer waiting
//! before it, so writers are not starved by a stream of readers nor readers by writers; a
//! writer whose process died holds new readers up for 2 s at most (a waiting writer asks again
//! at least every 500 ms). Over RedLock a waiting writer marks its intent
//! (`prefix:{name}:writer`, one second, renewed at each of its attempts) and no new reader
//! enters while it lives. A read inside a
//! read re-enters (no second share), a read inside a write re-enters the write, a write inside
//! a read is [`Error::WriteInsideRead`]. Over [`Config::redlock`] shared holds are refused
//! ([`Error::InvalidConfig`]) until they are built there.
//!
//! ## What a set of locks guarantees
//!
//! [`lock_all`] takes several locks at once, all or none: every guarantee above holds **for the
//! set**. While the holder believes it holds the set, it holds every lock of it and nobody else
//! holds any; when that can no longer be guaranteed for any one of them, it is told. Each lock
//! of a set is an ordinary `d2` lock holding the set's one value (no new layout; the version
//! stays `d2`). The names are sorted and deduplicated before anything is sent (`from == to` is
//! one lock), and a caller never waits while holding part of a set, so callers naming the
//! same locks in any order never deadlock. One script takes the whole set or nothing on one
//! server, through Sentinel and on each RedLock master (a quorum's set is held when a majority
//! granted all of it, otherwise what a minority granted is released); in a Redis Cluster the
//! set is taken one hash slot group at a time in a fixed order (slot, then name), and a busy
//! later group releases the earlier ones before waiting (one round trip per slot group; see
//! `lock::kind::set`). One lease for the set, until the earliest of its locks' deadlines (each
//! renewed on its own); renewal extends every lock, and a renewal that finds any lock not ours
//! loses the whole set (the body of `run` cancelled, [`Error::Lost`]). A cancelled acquire
//! leaves nothing of the set held; a dropped guard releases every lock. Fenced, each lock gets
//! its own token from its own fence floor ([`LockGuard::token_of`], [`fencing_token_of`]),
//! strictly increasing per name. A set is exclusive only (with `read` or a semaphore:
//! [`Error::InvalidConfig`]); a lock of it held by readers is busy, a semaphore's key
//! incompatible. Inside a body holding the whole set in one hold a set re-enters; holding only
//! some of it, taking the set is [`Error::InvalidConfig`]. Over [`Config::redlock`] fenced sets
//! are refused ([`Error::InvalidConfig`]) and a waiting set takes no place in the masters'
//! queue.
//!
//! ## What the fault suite checks
//!
//! The repository's reliability suite (`cargo test --test reliability`) runs these against real
//! `redis-server` processes and fails on any violation: mutual exclusion across OS processes
//! (no lost update, occupancy never above one); a SIGKILLed holder is taken over after its
//! lease and not before; a SIGSTOPped holder learns it lost the lock, its body is cancelled,
//! its release changes nothing and its stale fencing token is rejected; a frozen Redis fails
//! callers within the response timeout and reports renewed locks lost; a restarted Redis is
//! reconnected without re-init; killed connections and flushed scripts are survived; a lost or
//! delayed reply never double-counts a hold or hands a reply to the wrong request, and an
//! acquire stalled by a frozen Redis or network does not outlive its cleanup; a storm of
//! cancelled acquires leaves no key, renewal or subscription behind; bad input of every kind is
//! a typed error. (One case remains: if a single connection stalls while Redis stays healthy and
//! its bytes arrive much later, an acquire may land after its cleanup and the lock then sits
//! unowned until its ttl.)
//!
//! ## Fencing tokens
//!
//! A lock alone cannot stop a holder that was paused (GC, `SIGSTOP`, a slow disk) past its lease
//! from writing after someone else took the lock. A lock taken with
//! [`LockBuilder::fenced`] (the attribute's `fenced`) therefore returns a
//! [fencing token](LockGuard::token) that is strictly greater than every earlier token for the
//! same name; a resource that remembers the highest token it has seen can reject the stale
//! writer (Kleppmann, "How to do distributed locking").
//!
//! Tokens are opt-in because they cost: a fenced acquire runs a script that reads the server
//! clock and raises the fence floor (about 13 µs of Redis CPU per acquire + release against
//! about 5 µs for a plain one, `scripts/profile-scripts.sh`). Locks that only need mutual
//! exclusion skip it; [`LockGuard::token`] and [`fencing_token`] are `None` for them.
//!
//! The token is the Redis server's clock in microseconds, raised above the last token handed
//! out for the name. That last token (the *fence floor*) is kept in a small per-name key that
//! expires [`Config::fence_retention`] (default 10 min) after the last acquisition, so memory
//! does not grow with high-cardinality names such as `order:<id>`.
//!
//! Precisely: while a name's fence floor exists, every fresh token for that name is strictly
//! greater than every earlier one (a re-entry shares its outer hold's token). The floor is gone
//! when the retention passes without an acquisition, when Redis evicts it (a `volatile-*` or
//! `allkeys-*` eviction policy), after `FLUSHDB`/`FLUSHALL`, after a restart without
//! persistence, and after a failover to a replica that had not received it. From then on,
//! tokens are monotonic only as far as the Redis server's clock is: a backwards clock step (or a
//! replica whose clock is behind) can hand out a token smaller than one handed out before. Keep
//! server clocks disciplined (slewing NTP), keep the retention above your largest expected
//! clock step and gap between uses of a name, and persist Redis if tokens must survive a
//! restart. A fence key that someone overwrote with a non-number makes acquires of that name
//! fail (it is left as it was, expiring after the retention) instead of being overwritten.
//!
//! ## Eviction
//!
//! Lock keys carry a ttl, so under memory pressure the `volatile-*` eviction policies evict
//! them first (and `allkeys-*` may): an evicted lock is free for anyone while its holder learns
//! of it only at its next renewal, or never. **Run the lock's Redis with
//! `maxmemory-policy noeviction`.** At connect the client reads the policy (when `CONFIG GET`
//! is permitted) and warns once through `tracing` if it is anything else;
//! [`Config::require_noeviction`] turns that into [`Error::EvictionPolicy`].
//!
//! ## Many tasks at once (group commit)
//!
//! A client sends a plain acquire or a release at once when fewer than two of its requests
//! are in flight; requests that arrive while two are go out together as soon as one returns:
//! the group's acquires in one pipeline that ends with a single `ECHO` (which still proves
//! that every reply of the group answers its own request), its releases in one script call.
//! An uncontended lock pays nothing for this; under load an acquire + release costs Redis
//! about 60% of what it costs alone (`scripts/profile-scripts.sh`: 2.8 µs instead of 4.8 µs in
//! groups of 32), and the client one trip through redis-rs per group (BENCHMARKS.md in the
//! repository, B2). Nothing a caller can observe changes: each request gets its
//! own reply, a lease is still measured from before the request was queued (so a wait in the
//! queue only shortens it), requests leave in the order they came, and an acquire whose caller
//! gives up while it is queued is taken out of its group (a release is always sent: it may be
//! the cleanup of a held lock). Locks that ask for replica
//! acknowledgement (`min_replicas`), fenced acquires, re-entry checks, renewals and Redis
//! Cluster clients send each request on its own.
//!
//! ## Deployments
//!
//! One [`Client`] type, one API, whichever deployment: annotated code and the manual API stay
//! as they are, only the start-up configuration changes.
//!
//! | deployment | configuration | what a lock guarantees under failover |
//! | --- | --- | --- |
//! | one Redis server | `Config::new("redis://host:6379/")` | no failover: a restart without persistence frees every lock |
//! | a master with replicas, `min_replicas` | `Config::new(url).min_replicas(1)`, per lock [`LockBuilder::min_replicas`] or the attribute's `min_replicas = 1` | a lock acknowledged by `n` replicas (`WAIT`) survives a failover to any of them; a failover to a replica that had not acknowledged can still lose it |
//! | Redis Cluster | `Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])` ([`Config::cluster`]; `rediss://` seeds with the `tls` feature) | each lock lives on the master of its slot; a coordinated `CLUSTER FAILOVER` and a migration of its slot keep it; an unplanned failover keeps it if it was taken with `min_replicas`, and can lose a lock just taken without |
//! | Redis Sentinel | `Config::sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"], "locks").min_replicas(1)` ([`Config::sentinel`]) | locks live on the master the sentinels name; the client follows a failover by itself; `SENTINEL FAILOVER` keeps a lock that asked for `min_replicas`; asynchronous replication as above otherwise |
//! | RedLock over independent masters | `Config::redlock(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379", "redis://10.0.0.4:6379", "redis://10.0.0.5:6379"])` ([`Config::redlock`]; `rediss://` masters with the `tls` feature) | held while a majority of the masters keeps it: survives the loss (or restart with persistence) of a minority; timing assumptions and their limits below |
//! | TLS (feature `tls`) | `Config::new("rediss://host:6380/")`, [`Config::tls_root_certificates`] for a private CA, [`Config::tls_client_certificate`] for mutual TLS | as the same deployment without TLS |
//!
//! **Replica acknowledgement.** Redis replicates asynchronously: a lock acknowledged only by
//! its master is gone if the master fails before the write reached a replica. With
//! `min_replicas = n` the acquire and every renewal are followed, in the same round trip, by
//! `WAIT n` on the lock's own node (bounded by [`Config::replica_timeout`]). Too few
//! acknowledgements: the acquire releases the lock and fails with [`Error::Unreplicated`]
//! (which says how many replicas did acknowledge); a renewal counts as failed and is retried,
//! and if none is acknowledged before the lease runs out the lock is lost
//! ([`LossReason::Unreplicated`]). `WAIT` is not consensus: it narrows the window, fencing
//! tokens still protect the resource. While `WAIT` waits, later requests of the same client
//! queue behind it on its command connection: keep the replica timeout short.
//!
//! **Redis Cluster.** Built on redis-rs's cluster client: every key of one lock (the lock, its
//! fence floor, its release channel) shares one hash slot, so acquire, release, renewal and
//! `WAIT` are single-shard requests on the master of that slot. `MOVED` and `ASK` (a failover,
//! a slot migration) are followed, within the response timeout; renewal batches are grouped
//! per slot (one script call cannot span slots); waiters subscribe with sharded pub/sub
//! (`SSUBSCRIBE` on the lock's shard) and the release script notifies with `SPUBLISH`, so a
//! release message reaches only the shard whose clients wait for it. The cluster connection
//! lives on the client's runtime thread. What a lock guarantees is what its master
//! guarantees:
//!
//! - *Coordinated failover* (`CLUSTER FAILOVER`: the replica catches up before it takes over):
//!   a held, renewed lock keeps its lease, renewals go to the new master, nobody else can
//!   take it, and its release works there. The old master ends its sharded subscriptions as
//!   it becomes a replica; the client subscribes its waiters again on the new master.
//! - *Slot migration* (`redis-cli --cluster reshard`, `CLUSTER SETSLOT` + `MIGRATE`): `MIGRATE`
//!   moves the lock with its remaining ttl in one step (it is on the old owner until it is on
//!   the new one), requests meanwhile follow `ASK`, and afterwards `MOVED`; the holder's
//!   renewals and release go to the new owner. The server ends sharded subscriptions of a
//!   moved slot; the client subscribes its waiters again, on the new owner, so they are still
//!   woken by the release.
//! - *Unplanned failover* (the master dies, a replica is promoted): the lock survives if the
//!   promoted replica had it. A lock taken with `min_replicas = 1` (every replica of a
//!   one-replica shard acknowledged it before the call returned) does: nobody else can take
//!   it within its lease, and waiters subscribed on the dead master are subscribed again on
//!   the promoted one (retried until a master serves the slot; meanwhile they fall back to
//!   the holder's lease). Without `min_replicas`, a lock taken just before the master died
//!   may be missing on the promoted replica and another caller can take it; fencing tokens
//!   protect the resource then. With `min_replicas`, renewals need acknowledging replicas too:
//!   on a promoted master that has none yet, renewals fail and the holder learns it lost the
//!   lock ([`LossReason::Unreplicated`]) rather than holding it unprotected.
//! - *A master frozen past the node timeout* (a stall, `SIGSTOP`: a replica is promoted while
//!   it is frozen, and it resumes as a replica): its renewed locks are **lost, and the holder
//!   is told in time** ([`LossReason::Unreachable`]): redis-rs's cluster client keeps sending
//!   to the frozen node until the calls time out, and a fresh cluster connection may read the
//!   slot map from it, so no renewal reaches the promoted replica within a 6 s lease. Nobody
//!   else took such a lock while its holder believed it held it (reliability row `c2`).
//!
//! `tests/cluster.rs`, `tests/cluster_topology.rs` and `tests/cluster_tls.rs` exercise each of
//! these against real clusters; the reliability suite's row `c1` fails every master over
//! in turn under a counter race, and row `c2` (two replicas per master) runs a holder against
//! a contender through `CLUSTER FAILOVER` and a frozen master.
//!
//! **Redis Sentinel.** The client asks the sentinels, in order, for the master's address
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME <service>`) and uses the first address whose server says
//! it is the master (`ROLE`); every search is bounded by the connect and response timeouts,
//! and an unknown service or unreachable sentinels fail [`Config::connect`] with
//! [`Error::Connect`]. It follows a failover by itself: a task listens to the sentinels'
//! `+switch-master` announcements, and the command connection and the release subscriber move
//! to the new master as soon as one comes (the subscriber subscribes there again to every
//! channel its waiters listen on, so they are woken by releases on the new master); a command
//! connection that is dropped or answered `READONLY` finds the master again too. The master's
//! credentials are [`Config::sentinel_master_auth`]; the sentinels' own go in their URLs.
//!
//! What a lock guarantees under a failover. Sentinel promotes a replica first (`REPLICAOF NO
//! ONE`), names it a second or so later, and makes the old master a replica seconds after
//! that; until then the old master still accepts writes from clients that have not heard of
//! the switch, and **a replica still attached to it still acknowledges them**. With two
//! replicas that is the trap: a renewal sent to the old master after the other replica was
//! promoted is acknowledged (`min_replicas = 1`), but never reaches the new master, whose copy
//! of the key runs out on the old schedule. So the holder's deadline is never extended by a
//! reply it cannot place:
//!
//! 1. *A reply that crossed a switch counts for nothing.* Every lease reply is checked against
//!    the client's count of master switches; one that arrives after a switch it was sent
//!    before neither extends the lease nor reports it lost: it is retried on the new master.
//! 2. *After every switch, every lease is confirmed on the new master at once*, renewed or
//!    not: a renewed lease by a renewal there (which sets the new master's expiry to at least
//!    the holder's deadline: the deadline is measured from an earlier send), any other lease by
//!    an owner check (its key, if it is there, carries the expiry its acquire set). A lease the
//!    new master does not hold as ours is lost, and the holder is told ([`LossReason::Expired`]
//!    or [`LossReason::Stolen`]).
//! 3. *Switches are noticed fast.* Besides the sentinels' `+switch-master` announcements, the
//!    client asks a sentinel every 500 ms which master it names; another address than the one
//!    connected to is a switch. And a master is used only if, after it answered `ROLE` as a
//!    master, the sentinel that named it still names it: a master frozen through a failover
//!    resumes believing it is one, and the check itself may be what waited for it.
//!
//! **`min_replicas(ALL_REPLICAS)` closes the window below.** Every replica a failover could
//! promote must acknowledge: the members of the connected master's replica set (each replica
//! the sentinels listed as healthy since the client connected to this master, until they
//! declare it down). A replica being promoted stays a member, so a renewal sent to the old
//! master after the promotion is never acknowledged and never extends the lease; the old
//! master, not yet a replica of the new one after a switch, never became a member, so it is
//! not waited for and a planned failover keeps the lock. Its price: a member that is slow
//! makes every acquire and renewal wait for it (up to [`Config::replica_timeout`]), and one
//! that is dead fails them until the sentinels declare it down.
//!
//! With a count instead, what the holder relies on: the client hears of the switch before the
//! new master's copy of the key runs out. For a renewed lease whose renewals reached the promoted replica that copy lasts at
//! least 2/3 of the ttl past the promotion (renewals run every ttl/3); the client hears within
//! about a second of the sentinels naming the new master. Until it hears, the holder's deadline
//! may be later than the new master's copy (measured: 1.9 s later, for 0.44 s, with ttl 6 s and
//! `min_replicas = 1`; before rule 1 and 2 this lasted 1.87 s, until the next scheduled
//! renewal), but nobody can take the lock there while that copy lives. A client cut off from
//! every sentinel and from the new master, but not from the old master, keeps renewing there
//! only while the old master's replicas acknowledge (`min_replicas`) — the promoted one never
//! does — so set `min_replicas` where that partition matters, and pass fencing tokens to the
//! resource: asynchronous replication can always lose the last write of a master that dies.
//!
//! Which failovers a renewed lock (ttl 6 s) survives, with a master and **two** replicas, from
//! `tests/sentinel_failover.rs` (a contender tries to take the lock every 10 ms throughout; in
//! every case it never took it while the holder believed it held it):
//!
//! | `min_replicas` | `SENTINEL FAILOVER` | master `SIGKILL` | master `SIGSTOP` for 5 s (failover meanwhile) |
//! | --- | --- | --- | --- |
//! | 0 | kept | — | — |
//! | 1 | kept | kept | kept; a client connecting during the freeze finds the new master (before: bound to the resumed old master and took the lock, 7.96 s of overlap) |
//! | 2 (every replica) | lost at the end of its lease, the holder told ([`LossReason::Unreplicated`]): the new master has one replica until Sentinel converts the old master, about ten seconds later | — | — |
//! | [`ALL_REPLICAS`] | kept, and the holder's deadline never later than the new master's copy (a gap of 0 at every sample) | kept with a ttl of 10 s, gap 0 (with 6 s, lost once on 2 loaded cores: the other replica must be re-pointed and resync before it acknowledges; the holder told) | — |
//!
//! Keep the lease long enough to outlast the failover when `min_replicas` counts every
//! replica: until the old master rejoins, every acquire is refused with
//! [`Error::Unreplicated`] and renewals are not counted. `min_replicas = 1` of two kept the
//! lock through all three faults above (three rounds each: reliability row 18); the
//! `SIGKILL` case for 0 and 2, and the `SIGSTOP` case for 0, 2 and [`ALL_REPLICAS`], are not
//! measured yet.
//!
//! **RedLock.** [`Config::redlock`] runs the RedLock algorithm over N independent masters
//! (no replication between them; 3 or 5). An acquire goes to every master at once, each
//! bounded by the response timeout, and succeeds only if a majority granted it while enough of
//! the lease is left: its validity is the ttl minus the time the acquire took minus the lease
//! margin ([`LEASE_MARGIN`] + 1% of the ttl, for timer rounding and clock-rate drift); the
//! lease the guard trusts is measured from before the requests were sent, as everywhere. No
//! majority: whatever a minority granted is released again before anything else (an acquire
//! that found the lock held elsewhere fails with [`Error::Busy`] or waits; one that could not
//! hear from enough masters fails with [`Error::NoQuorum`], which names how many agreed and
//! how many a majority needs, within about one response timeout). Renewal and release count
//! by majority too: a renewal extends the lease only if a majority renewed it, and a lock a
//! majority no longer has is lost ([`LockGuard::lost`] resolves); while the masters that did
//! not answer could still make a majority the call fails as [`Error::NoQuorum`] (a renewal is
//! retried until the lease runs out, a release is retried in the background; an acquire with
//! a `wait` tries again until its wait runs out). A master whose last request failed or
//! timed out is known to be down until it answers again (it is still sent every request,
//! and whatever it grants late is released in order): once every other master has
//! answered, an acquire or release that cannot reach a majority without the down ones fails
//! at once with the `NoQuorum` it would end with, instead of waiting for their requests to
//! fail; so an attempt that the live masters split between two waiters is retried after a
//! short randomised pause (15 ms at first), not after their timeouts
//! (tested: 40 contended sections with 2 of 5 masters killed finish within 4 s at a 5 s
//! response timeout, measured 0.3–0.4 s, as with all up; with 3 of 5 down acquires fail with `NoQuorum`, never `Busy`). Keep the response timeout short over a
//! quorum all the same (the RedLock description suggests a few to tens of milliseconds per
//! master for a ttl of seconds, on a LAN): it bounds what a master that just went down costs
//! the calls in flight. The watchdog renews a client's locks in
//! batches; a lock of a batch that stays undecided fails its own renewal only, the others are
//! renewed. [`Config::connect`] needs a majority of the masters to answer (as a connect to one
//! server needs it up); a minority may be down and is used once it is back. Every call settles as soon as a majority
//! decided it, so a master that is down or frozen does not slow acquires, releases or
//! renewals down (tested with two of five masters killed, and frozen with `SIGSTOP`: a cycle
//! stays under 1 s at a 2 s response timeout, measured 2–6 ms). The requests to the masters that have not
//! answered yet finish in the background, each bounded by the response timeout, so a release
//! still reaches every master; a request for the same lock is sent to such a master only after
//! them, so whatever it grants late is released by the release that follows (the holder's, or
//! the one after a failed attempt). Waiters subscribe to the lock's release channel on every
//! master and retry once `N − majority + 1` masters published a release since their attempt:
//! a busy attempt found at least that many holding the lock for others, and each publishes
//! when its key is released; while a holder keeps its majority only the other `N − majority`
//! masters can publish at all (releasing busy attempts' minority grants), so waiters do not
//! wake each other. The holder's remaining ttl stays the fallback (a crashed holder never
//! publishes). Tested in
//! `tests/redlock_waiting.rs`: woken within 1 s of the release with a 10 s lease (measured: a
//! few milliseconds), also with two masters
//! killed; no attempts while waiting; no subscription left on any live master; no wake-up
//! storm around a crashed holder of a bare majority.
//!
//! Waiting over a quorum is fair across clients: waiters take their turns in the order they
//! came. Every master keeps a queue per lock (`prefix:{name}:queue`, and `:queue:until` for
//! when each entry lapses) of the acquires that wait, ordered by a ticket that is the same on
//! every master (the waiting acquire's start time on its client's clock), and grants a free
//! lock only to the lowest ticket it has queued. So the waiters of several clients woken by one
//! release do not split the masters between them, and a client that releases and asks again at
//! once queues behind the waiters instead of taking the lock back before their wake-ups
//! arrive (before the queue, in a run of 4 clients, one got 3 turns and 9 waits of 3 s ran out
//! while another held the lock 42 times in a row). Tested in `tests/redlock_fairness.rs` (4
//! clients, holds of 20–200 ms, `wait = 3s`: no wait runs out, Jain's index over the clients'
//! turns at least 0.9; measured 1.000, with a handoff p50 of 3–4 ms on this machine, where
//! a lone waiter's is about 2 ms as before) and by reliability row 20 (the same with two of
//! five masters killed). The masters also tell a waiter how many are queued ahead of it: it
//! lets their wakes pass (looking again at most 300 ms after each, in case one of them left)
//! and retries at its own, so a release costs about one attempt, not one per waiting client. The queue only ever refuses
//! a grant (exclusion rests on the lock key alone), and it bounds what a waiter that went away
//! costs: an entry lapses at the holder's pttl plus a grace of 300 ms after its waiter's last
//! attempt, the waiters ahead of a caller that found the lock free get at most the grace more,
//! and a waiter takes its entry out (in the background) when its acquire ends, however it
//! ends; both keys expire with their last entry. An acquire without `wait` queues nowhere, but it does
//! not take a free lock while others wait for it either (it is `Busy`). Tickets come from the
//! clients' clocks: a client on a host whose clock is ahead by a second queues behind waiters
//! that came up to a second later. The group commit is for a standalone
//! server only; `min_replicas` does not apply. The client's identity record (which process an
//! owner id belongs to) is written on every master at connect and refreshed on every master,
//! so the `distlock` CLI pointed at any one master names the holders of the locks it granted;
//! a master down at connect gets it at the next refresh, within 20 s (`tests/redlock_ops.rs`).
//! Over TLS, each master is a `rediss://` URL with the client's certificates
//! (`tests/redlock_tls.rs`: three mutual-TLS masters, acquire, wait, renewal, release and
//! fencing).
//!
//! Fencing over a quorum: each master keeps its own fence floor and the masters' clocks
//! differ, so the largest token of one majority is not by itself above an earlier holder's
//! from another majority. A fenced acquire therefore takes two more rounds once a majority
//! granted it: it reads the fence floors of a majority, picks a token above all of them (and at
//! least the largest the acquire handed out), raises the floors of a majority to it, and hands
//! it out only if the lease is still valid then (otherwise it releases and fails with
//! [`Error::NoQuorum`]). A later holder reads a majority, hence at least one master whose floor
//! was raised, after its own acquire saw the earlier lock gone, so its token is strictly
//! larger (as long as the fence floors live: [`Config::fence_retention`]); tested with a
//! master whose floor is far ahead of the others' clocks and then killed. Tested with five real servers (`tests/redlock.rs`): an exact counter race, two masters killed
//! (locks still work, a renewed lock stays held), three killed (`NoQuorum`, the live masters'
//! grants released; a renewed lock is lost within its lease). The floors' raise counts only
//! if every floor of its majority was below the token (else it tries again, higher), so two
//! holders at once (permits, readers) never get the same token.
//!
//! Semaphores and shared holds over a quorum. A read hold and a write each count when a
//! majority granted them (two majorities share a master, which granted only one of them), and
//! a waiting writer marks its intent on every master where readers are, so writers do not
//! starve. A semaphore's permit is not a majority: each master grants at most `n`, so `h`
//! holders of `q` masters each need `h·q ≤ n·m`, and at most `n` holders needs
//! `q = ⌊n·m/(n+1)⌋ + 1` of the `m` masters, for the acquire and each renewal (a majority for
//! one permit; 2 permits over 5 masters need 4, so one master down is tolerated, not two).
//! Their waiters retry on releases and at the first lease's end: the FIFO queue above is the
//! lock's only. Tested in `tests/redlock_kinds.rs` (at most `n` holders and `n` reached over 3
//! and 5 masters; a majority with room refused for 2 permits over 5; 2 of 5 masters down:
//! `NoQuorum`; a renewal by a majority but fewer than `q`: lost; readers overlapping, writers
//! alone and not starved; cancelled acquires leave nothing on any master).
//!
//! What RedLock does not buy (Martin Kleppmann's critique, "How to do distributed locking",
//! 2016, holds here as it does for every lease): safety rests on timing assumptions, that
//! the masters' clocks and this machine's run at about the same rate (the 1% margin), that a
//! master that restarts has kept its keys (persistence with `appendfsync always`, or it stays
//! down for a ttl before rejoining, else a second majority can form), and that the holder is
//! not paused (GC, swap, a stopped VM) past its lease between checking it and touching the
//! resource. A pause or a clock jump can let two holders believe they hold the lock; the
//! guard is told as soon as it can be known (a renewal that finds no majority), not before.
//! What protects the resource from a holder that lost its lock without knowing is a fencing
//! token checked by the resource itself: take the lock with [`LockBuilder::fenced`] and have
//! the resource refuse a token lower than the highest it has seen. The tokens' order rests on
//! a majority keeping its fence floors (a master that restarts without its data forgets its
//! floor, as it forgets its locks).
//!
//! What is known and left, over RedLock:
//! - The healthy-master cost of settling calls early (a background task per call that leaves
//!   requests out, ordering per master and lock value, the masters' drivers on the client's
//!   thread): a sequential acquire + release measured about 375 µs before and 420–440 µs after
//!   on five local servers (noisy); there is no group commit per master yet.
//! - Two acquires that split the live masters while others do not answer wait out the
//!   response timeout before both try again (keep it short over a quorum). A master whose
//!   connection is being re-made when a request's time is up may get the request queued
//!   behind it first: a late grant missed that way expires at its ttl.
//! - Queue tickets come from the clients' clocks: a host whose clock runs ahead queues later
//!   than it came. A client that does not know the queue (an older distlock) is excluded, not
//!   held to its turns. Under a saturated lock (1 ms bodies, every client always waiting) the
//!   FIFO handoff costs throughput: reliability row 17 completed 346 / 350 / 485 sections (all
//!   up / two down / restarted) before the queue and 248–305 / 161–316 / 353–481 with it.
//! - A master that was down when a channel was subscribed is not subscribed later while the
//!   channel keeps enough masters (the holder's pttl covers it).
//! - The CLI reads one master at a time (`--url`): every master holds every client's identity
//!   record, and a forced release there deletes that master's copy only.
//! - Permits and read holds: no FIFO queue (a waiter may be overtaken), and a release counts
//!   by majority as a lock's (freeing never lets a holder in early; a permit's loss below its
//!   quorum is what its renewal reports). No reliability row runs them over a quorum yet.
//!
//! **TLS.** With the `tls` feature, `rediss://` URLs connect through rustls (ring as its
//! crypto provider unless the application installed another): the server's certificate is
//! checked against the system's trust store, or against [`Config::tls_root_certificates`]
//! only. Every connection of the client (commands, the release subscriber, the identity
//! refresh; each master of a RedLock quorum) uses the same settings. Without the feature a `rediss://` URL fails
//! [`Config::validate`] with a message that names the feature.
//!
//! Configuration files and `DISTLOCK_*` variables read every deployment
//! (`DISTLOCK_CLUSTER_NODES`, `DISTLOCK_SENTINELS` with `DISTLOCK_SENTINEL_SERVICE`,
//! `DISTLOCK_REDLOCK_MASTERS`; `cluster_nodes`, `sentinels`, `redlock_masters` in a file) and
//! `min_replicas`, but not TLS certificates: set those in code.
//!
//! ## Server clock steps and restarts
//!
//! Redis keeps a key's expiry as a wall-clock date, so a Redis server whose clock steps forward
//! (`date -s`, an NTP step after a long drift, a VM resumed from a snapshot) expires every lock
//! on it that much early: at once if the step is larger than the time left. A server that
//! restarts comes back without the locks taken since its last snapshot (all of them without
//! persistence). Either way another client can take the lock while its holder still believes
//! it holds it; no client can prevent that. Each client checks every server (every master of a
//! cluster, each master of a RedLock quorum) every [`Config::server_check`] (250 ms by
//! default): its clock (`TIME`), compared with how far this machine's monotonic clock moved,
//! where a step forward of more than 20 ms plus the two reads' round trips counts; and its run
//! id (`INFO server`), new at every start. A step or a restart counts like a Sentinel
//! failover: every lease of the client, renewed or not, is confirmed on the server at once,
//! and a reply that crossed it counts for nothing. A holder whose lock is gone is told within
//! about one period instead of at its next renewal (up to ttl/3 later) or, without renewal,
//! never. Measured as how long the holder went on believing after another client took its
//! lock, against real servers (`tests/clock_steps.rs`: a clock stepped by 60 s;
//! `tests/server_restart.rs`: `SIGKILL` and start again):
//!
//! | fault | renewed holder (ttl 6 s) | holder without renewal (ttl 8 s) |
//! | --- | --- | --- |
//! | clock step, before the check | 982 ms (its next renewal) | the rest of its lease (2,978 ms, until the test ended) |
//! | clock step, with it | 0–232 ms (one server, a cluster, a RedLock majority) | 0–234 ms |
//! | restart, before the check | 845 ms | the rest of its lease (2,825 ms) |
//! | restart, with it | 62–321 ms | 62–340 ms |
//!
//! A step back makes keys outlive their leases, which is safe, and is ignored. Keep servers'
//! clocks slewed, not stepped, and persist Redis (`appendonly yes`) if a restart must keep its
//! locks. By the same comparison, a suspend of *this* machine (which the monotonic clock
//! leases are measured with does not count) looks like every server's clock running ahead, so
//! it should trigger the same confirmation; that case is reasoned, not tested.
//!
//! ## Limits
//!
//! Each lock lives on one Redis node (a server, the master the sentinels name, or the master of
//! its slot in a cluster), or on a majority of independent masters ([`Config::redlock`]). With
//! asynchronous replication, a failover can lose a lock that was just acquired on the old
//! primary, and two owners may then hold it; `min_replicas` narrows that window and fencing
//! tokens are what protects the resource. RedLock trades that for timing assumptions (see
//! "Deployments"). Everything one lock touches shares a Redis Cluster hash slot (see
//! [`hash_slot`]).
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod background;
mod client;
mod config;
mod deploy;
mod error;
pub mod fence;
pub mod leader;
mod lease;
mod lock;
mod macro_support;
mod metrics;
mod registry;
mod sync;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod wire;

#[doc(hidden)]
pub use wire::scripts;

pub use client::Client;
pub use config::duration::{parse_duration, DurationError};
pub use config::{Config, ALL_REPLICAS};
pub use error::{Error, HeldBy, LossReason, Operation, Result};
pub use fence::Fence;
pub use leader::{leader, Leader, LeaderBuilder, LeaderWatch, Leadership, Observed};
pub use lease::{LEASE_MARGIN, MAX_TTL, MIN_TTL};
pub use lock::builder::{lock, lock_all, semaphore, LockBuilder};
pub use lock::context::{ensure_held, fence, fence_of, fencing_token, fencing_token_of};
pub use lock::guard::LockGuard;
pub use lock::run::Run;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metrics::{describe_metrics, HISTOGRAM_BUCKETS};
pub use registry::shutdown;
pub use wire::keys::{hash_slot, MAX_NAME_LEN};

/// The redis-rs crate this runtime is built on, so [`Error::Redis`]'s source can be matched
/// (and `redis` types named) without a separate, possibly mismatched, `redis` dependency.
pub use redis;

/// Connects to Redis at `url` and installs the default client: call once at startup.
///
/// Same as `Config::new(url).install()`. A second call fails with
/// [`Error::AlreadyInitialized`]; use [`Config::install_as`] for more clients.
pub async fn init(url: impl Into<String>) -> Result<Client> {
    Config::new(url).install().await
}

/// Support for code generated by `#[distributed_lock]`. **Not public API.**
#[doc(hidden)]
pub mod __private {
    pub use crate::macro_support::*;
}
