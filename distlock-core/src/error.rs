//! The one error type every distlock operation returns.

use std::fmt;
use std::time::Duration;

/// Why a held lock stopped being held.
///
/// A lease that runs out is told apart by what its renewals met while it was still
/// guaranteed: error replies ([`Refused`](Self::Refused)), too few replicas
/// ([`Unreplicated`](Self::Unreplicated)), no answer ([`Unreachable`](Self::Unreachable)), or
/// nothing at all, because no renewal was attempted in time ([`LeaseElapsed`](Self::LeaseElapsed):
/// renewal off, the hold cap, or a stalled process). The metrics' `reason` label is the
/// variant's name in snake case; `ops/README.md` ("DistlockLocksLost") says what to do for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// Renewal found the lock key gone (it expired, or someone deleted it).
    Expired,
    /// Renewal found the lock held by another owner.
    Stolen,
    /// Renewals went unanswered until the lease ran out, while this process ran and kept
    /// trying: an attempt failed on the way (no reply within the response timeout, a broken
    /// connection, too few RedLock masters heard) or went unanswered for half of what the lease
    /// had left. Redis is down, frozen or cut off from this host, so the lock can no longer be
    /// guaranteed.
    Unreachable,
    /// The lease ran out with no renewal attempt failing: `renew` was off, the hold cap
    /// (`max_hold`) was reached, or this process stalled past it (`SIGSTOP`, a paused VM, a
    /// blocked client runtime) and did not send its renewals in time. It says nothing about
    /// Redis.
    LeaseElapsed,
    /// Redis answered the renewals with an error (for example `READONLY`, `NOPERM` or `OOM`)
    /// until the lease ran out: reachable, but it would not extend the lease.
    Refused,
    /// The renewals were not acknowledged by the lock's `min_replicas` replicas until the lease
    /// ran out: extended on the master, but not durably enough to count.
    Unreplicated,
    /// The caller let the hold go: [`LockGuard::release`](crate::LockGuard::release), a dropped
    /// guard, [`Leadership::resign`](crate::Leadership::resign) or a dropped
    /// [`Leadership`](crate::Leadership). Set the moment the release is decided, before it is
    /// sent (so before the lock can be handed to anyone else): every
    /// [`lost()`](crate::LockGuard::lost) of the hold resolves with it, and everything still
    /// sharing the hold (a task holding its `lost()` future or a
    /// [`LeaderWatch`](crate::leader::LeaderWatch), a body asking [`crate::ensure_held`]) is
    /// told it is no longer held. Not a loss: no lost metric counts it.
    Released,
}

/// What an acquire found in its way when it was busy ([`Error::Busy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldBy {
    /// Another owner holds the lock.
    Owner,
    /// Every permit of the semaphore is held (`distlock::semaphore(name, permits)`).
    Permits {
        /// The semaphore's count.
        permits: u32,
    },
    /// A write (the lock itself) met shared (read) holders, or another writer took the lock
    /// first.
    Readers,
    /// A read hold met a writer that holds the lock, or waits for it (its intent keeps new
    /// readers out so that writers do not starve).
    Writer,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "the lock key expired or was deleted",
            LossReason::Stolen => "another owner holds the lock now",
            LossReason::Unreachable => "Redis could not be reached before the lease ran out",
            LossReason::LeaseElapsed => {
                "the lease (ttl) elapsed with no renewal attempt failing (renewal off, the hold cap reached, or this process stalled past it)"
            }
            LossReason::Refused => "Redis refused to renew the lease until it ran out",
            LossReason::Unreplicated => {
                "too few replicas acknowledged the renewals until the lease ran out"
            }
            LossReason::Released => "the hold was released (or its guard dropped) by its holder",
        })
    }
}

/// Which Redis operation on a lock an error happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// Acquiring a lock.
    Acquire,
    /// Releasing a lock.
    Release,
    /// Subscribing to release notifications.
    Subscribe,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Acquire => "acquire",
            Operation::Release => "release",
            Operation::Subscribe => "subscribe",
        })
    }
}

/// Everything that can go wrong while taking, holding or releasing a lock.
///
/// Every message names the lock key (when there is one) and says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by someone else (or every permit of the semaphore is) and was not
    /// released within the wait time; `held_by` says what stood in the way.
    #[error("{}", busy_message(key, .waited, .held_by))]
    Busy {
        /// The lock's (or semaphore's) name.
        key: String,
        /// How long this caller waited before giving up (zero when `wait` was not set).
        waited: Duration,
        /// What held it: another owner, every permit, readers or a writer.
        held_by: HeldBy,
    },
    /// A lock this caller held is no longer guaranteed to be held.
    #[error("lock `{key}` was lost: {reason}; the protected work must not be trusted to have run exclusively")]
    Lost {
        /// The lock's name.
        key: String,
        /// What happened.
        reason: LossReason,
    },
    /// Release was refused because the lock is held by another owner (or nobody).
    #[error("lock `{key}` is not held by this owner, so it was not released (it expired or was taken over)")]
    NotOwner {
        /// The lock's name.
        key: String,
    },
    /// The lock's Redis key holds something that is not a lock of this distlock protocol (`d2`):
    /// a lock written by another distlock version, or another program's key under the prefix.
    /// Nothing was changed.
    #[error("lock `{key}`: its Redis key holds something that is not a distlock `d2` lock (another distlock version, or another program, uses this key): upgrade every client of this Redis together, or give them different `Config::key_prefix`es")]
    Incompatible {
        /// The lock's name.
        key: String,
    },
    /// A semaphore ([`crate::semaphore`]) was asked for with another number of permits than
    /// its live holders took it with. Everyone using one name must agree on the count: it is
    /// never resized. Nothing was changed.
    #[error("semaphore `{key}` is held with {held} permits, but this caller asked for {asked}: every user of one name must agree on the number of permits (it is never resized while anyone holds a permit)")]
    PermitsMismatch {
        /// The semaphore's name.
        key: String,
        /// The permits this caller asked for.
        asked: u32,
        /// The permits its live holders took it with.
        held: u32,
    },
    /// The lock was asked for exclusively (a write) inside a body that holds it shared (a read,
    /// [`crate::LockBuilder::read`]) in the same call chain. A read hold is never upgraded in
    /// place: two readers upgrading at once would each wait for the other to leave. Nothing
    /// was changed (the read hold is still held). Take the lock exclusively around the whole
    /// body instead: a read inside a write re-enters the write.
    #[error("lock `{key}` is asked for exclusively inside a body that holds it for reading: a read hold is never upgraded (two readers upgrading would wait for each other); take it exclusively around the whole body instead (a read inside a write re-enters the write)")]
    WriteInsideRead {
        /// The lock's name.
        key: String,
    },
    /// The lock was taken on its master, but fewer replicas than the lock's `min_replicas`
    /// acknowledged it within the replica timeout, so it was released again (nobody holds it
    /// through this acquire).
    #[error("lock `{key}` was not acknowledged by enough replicas: {acknowledged} of the {required} required within the replica timeout, so it was released again; check that the replicas are up and linked (`INFO replication`), or lower `min_replicas` / raise `Config::replica_timeout`")]
    Unreplicated {
        /// The lock's name.
        key: String,
        /// Replicas that acknowledged the write.
        acknowledged: usize,
        /// Replicas the lock asked for (`min_replicas`).
        required: usize,
    },
    /// A RedLock quorum (see [`crate::Config::redlock`]) could not be reached: fewer masters than
    /// a majority agreed (answered in time and granted, released or renewed the lock; for a
    /// semaphore's permit, fewer than its quorum, `⌊n·m/(n+1)⌋ + 1` of the `m` masters: see
    /// [`crate::semaphore`]). An
    /// acquire that fails this way has released whatever it took (in the background if a
    /// master does not answer; it expires at its ttl otherwise). An acquire with a `wait` tries
    /// again meanwhile (two acquires can split the masters between them while some do not
    /// answer) and fails with this only if the last attempt before its wait ran out did.
    #[error("{op} of lock `{key}` did not reach a quorum: {agreed} of the {required} masters it needs agreed in time (check that enough RedLock masters are up and reachable: a majority, more for a semaphore's permit)")]
    NoQuorum {
        /// What was attempted.
        op: Operation,
        /// The lock's name.
        key: String,
        /// Masters that agreed (granted, released or renewed) in time.
        agreed: usize,
        /// Masters it needs: a majority (a semaphore's permit: its quorum).
        required: usize,
    },
    /// No client was installed before the first lock.
    #[error("distlock is not initialized: call `distlock::init(\"redis://...\").await` once at startup, before taking any lock")]
    NotInitialized,
    /// A client was installed twice under the same name.
    #[error("{}", already_initialized_message(.client.as_deref()))]
    AlreadyInitialized {
        /// The client name, `None` for the default client.
        client: Option<String>,
    },
    /// A lock asked for a named client that was never installed.
    #[error("no distlock client named `{name}`: install it at startup with `distlock::Config::new(url).install_as(\"{name}\").await`")]
    UnknownClient {
        /// The name that was asked for.
        name: String,
    },
    /// The lock name cannot be used as a Redis key.
    #[error("invalid lock key `{key}`: {reason}")]
    InvalidKey {
        /// The lock name (shortened when very long).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The configuration (URL, durations) is invalid.
    #[error("invalid distlock configuration: {reason}")]
    InvalidConfig {
        /// What is wrong, without any secret from the URL.
        reason: String,
    },
    /// The Redis server may evict lock keys under memory pressure, and the client was told to
    /// refuse that ([`crate::Config::require_noeviction`]).
    #[error("Redis `maxmemory-policy` is `{policy}`, which may evict lock keys (they carry a ttl) and so hand a held lock to someone else: set `maxmemory-policy noeviction` on the server, or drop `Config::require_noeviction`")]
    EvictionPolicy {
        /// The server's `maxmemory-policy`.
        policy: String,
    },
    /// The client could not connect to Redis, or the connection's set-up failed (a missing or
    /// wrong password is reported here, at start-up).
    #[error("{}", connect_message(to, source))]
    Connect {
        /// What the client tried to reach: the URL, the cluster's seed nodes, the Sentinel
        /// service and its sentinels, or the RedLock masters (passwords replaced by `***`).
        to: String,
        /// The underlying error from redis-rs (it never contains the URL).
        #[source]
        source: redis::RedisError,
    },
    /// Redis did not accept a connection (and answer its set-up) within the connect timeout
    /// plus the response timeout.
    #[error("could not connect to Redis at {to} within {after:?}: check that the server is up and reachable, or raise `Config::connect_timeout`")]
    ConnectTimeout {
        /// What the client tried to reach (as in [`Error::Connect`]).
        to: String,
        /// The time that elapsed.
        after: Duration,
    },
    /// Redis did not answer within the configured response timeout.
    #[error("Redis did not answer the {op} of lock `{key}` within {after:?}: check that the server is up and reachable, or raise `Config::response_timeout`")]
    Timeout {
        /// The operation.
        op: Operation,
        /// The lock's name.
        key: String,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// Redis refused a command, a key or a channel to the client's ACL user: the user lacks a
    /// permission distlock needs for this `op` (see the `distlock` crate docs, "Least
    /// privilege", for the `ACL SETUSER` line of each deployment). Never retried, not even
    /// within a `wait`: it lasts until an operator changes the user's ACL.
    #[error("Redis refused the {op} of lock `{key}` to the client's user: {refused}; grant the user what distlock needs (the `distlock` crate docs, \"Least privilege\", give the `ACL SETUSER` line of each deployment; `ACL LOG` on the server names the refused command, key or channel)")]
    PermissionDenied {
        /// What was attempted.
        op: Operation,
        /// The lock's name.
        key: String,
        /// Redis's refusal in its own words, e.g. `NOPERM this user has no permissions to run
        /// the 'evalsha' command`, or one that names the key or channel. Inside a script Redis
        /// 7.0 does not say which command it refused (`ACL LOG` does; 7.2 names it).
        refused: String,
    },
    /// Redis returned an error or the connection failed.
    #[error("Redis error during {op} of lock `{key}`: {source}")]
    Redis {
        /// The operation.
        op: Operation,
        /// The lock's name.
        key: String,
        /// The underlying error from redis-rs.
        #[source]
        source: redis::RedisError,
    },
    /// A fenced write ([`fence`](mod@crate::fence)) was refused because a holder with a higher fencing
    /// token of the same lock has written the resource already: the writer lost its lock (a
    /// pause past its lease, a partition, a failover) and someone else has held it since.
    /// Nothing was changed (in SQL: the transaction can no longer commit).
    #[error("write to `{resource}` refused: fencing token {token} is older than {seen}, a newer holder of the same lock that has written it (or, fenced per lock, written another key of the lock or claimed the store), so this holder lost its lock; nothing was changed (do not retry with this token: take the lock again)")]
    Fenced {
        /// The resource written: the Redis key, or the SQL `resource` name.
        resource: String,
        /// The writer's token.
        token: u64,
        /// The highest token that has written the resource (fenced per lock: the lock's
        /// watermark, raised by any key's write or a claim).
        seen: u64,
    },
    /// A fenced write ([`fence`](mod@crate::fence)) met a resource fenced by another lock, or a Redis key
    /// holding a value that was not written through [`crate::fence::redis`]. Tokens compare
    /// only within one lock name, so this is a misuse, not a stale writer: nothing was
    /// compared or changed.
    #[error("{}", fence_mismatch_message(resource, lock, .fenced_by.as_deref()))]
    FenceMismatch {
        /// The resource written.
        resource: String,
        /// The lock whose token the write carried.
        lock: String,
        /// The lock that fenced the resource; `None` when the Redis key holds a value that is
        /// not a fenced value (a plain string, a list, ...).
        fenced_by: Option<String>,
    },
    /// [`crate::fence()`] (or [`crate::fence_of`]) was called where there is no fencing
    /// token to give: outside a body run under a lock, or under a lock taken without
    /// `fenced`.
    #[error("{}", not_fenced_message(.key.as_deref()))]
    NotFenced {
        /// The lock the body holds, taken without `fenced`; `None` outside any locked body
        /// (or, for [`crate::fence_of`], when the body does not hold that name).
        key: Option<String>,
    },
    /// [`crate::ensure_held`] was called outside a body run under a lock (an annotated function,
    /// [`LockBuilder::run`](crate::LockBuilder::run) or
    /// [`LeaderBuilder::run`](crate::LeaderBuilder::run)): there is no hold to ask about.
    #[error("no lock here: `distlock::ensure_held()` asks about the locks held by the body it is called from (an annotated function, `run`, or a leader's `run`), and this call chain holds none (a task spawned inside the body does not inherit them: pass it a `LeaderWatch` or the guard's `lost()` future)")]
    NotLocked,
    /// The store of a fenced write ([`fence`](mod@crate::fence)) failed: a Redis error on the caller's
    /// connection, or a database error. Whether the write landed is unknown only if the
    /// connection failed mid-call; a refused write is [`Error::Fenced`], never this.
    #[error("fenced write to `{resource}` failed in its store: {source}")]
    Store {
        /// The resource written.
        resource: String,
        /// The store's own error (`redis::RedisError`, or `sqlx::Error` with the
        /// `sqlx-postgres` feature).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// `fence::sqlx::advance` (feature `sqlx-postgres`) found no `distlock_fences` table in the
    /// database: the schema was never created there. Nothing was fenced (the transaction has
    /// failed).
    #[error("fence of `{resource}` not advanced: the table `distlock_fences` does not exist in this database; create it once with `distlock::fence::sqlx::SCHEMA` (`sqlx::raw_sql(SCHEMA).execute(&pool).await?`), or add distlock-core/migrations/ to your own migrations")]
    FenceTableMissing {
        /// The resource whose fence was to advance.
        resource: String,
    },
    /// `fence::sqlx::advance` (feature `sqlx-postgres`) was called on a connection outside a
    /// transaction, where the fence would protect nothing (its row lock ends with the
    /// statement). Nothing was fenced.
    #[error("fence of `{resource}` not advanced: the connection is not in a transaction, where `advance` protects nothing (the fence's row lock would end with its own statement); call it first in the transaction that makes the writes (`let mut tx = pool.begin().await?; advance(&mut tx, ..)`)")]
    FenceOutsideTransaction {
        /// The resource whose fence was to advance.
        resource: String,
    },
    /// `fence::sqlx::advance` (feature `sqlx-postgres`) waited twice its bound for another
    /// holder's transaction to let go of the resource's fence row: that holder is still
    /// running a statement (a holder frozen idle in its transaction is ended by Postgres after
    /// its bound). The transaction has failed: roll it back and retry.
    #[error("fence of `{resource}` stayed locked by another holder's transaction for the whole {waited:?} this advance waited (twice its bound): that holder is still running a statement (one frozen idle in its transaction is ended by Postgres after its bound); this transaction has failed: roll it back and retry")]
    FenceLocked {
        /// The resource whose fence was to advance.
        resource: String,
        /// How long `advance` waited: twice its bound.
        waited: Duration,
    },
    /// A fenced write ([`crate::fence::redis::FencedStore`]) named a key outside the hash slot
    /// of its lock's watermark: a Redis Cluster refuses such a script (`CROSSSLOT`), and so
    /// does the store on one server and through Sentinel, before it sends anything, so code
    /// that passes its tests on one server does not fail on a Cluster. Nothing was written.
    #[error("fenced write to `{resource}` refused: the key is not in the hash slot of `{watermark}`, the watermark of lock `{lock}`, and a fenced write checks both in one script (a Redis Cluster refuses it, CROSSSLOT, so the store refuses it everywhere); name every key written under lock `{lock}` with its hash tag `{{{lock}}}` (e.g. `data:{{{lock}}}`), or keep fences per key (`FencedStore::per_key`, the weaker promise); nothing was written")]
    FenceCrossSlot {
        /// The key written.
        resource: String,
        /// The lock whose token the write carried.
        lock: String,
        /// The lock's watermark key.
        watermark: String,
    },
    /// The Redis of fenced writes ([`crate::fence::redis::FencedStore`]) may evict keys, or
    /// would not say whether it may; found at the store's first write. Nothing was written.
    #[error("{}", fence_eviction_message(.policy.as_deref()))]
    FenceEviction {
        /// The server's `maxmemory-policy`; `None` when neither `INFO memory` nor `CONFIG GET`
        /// was permitted.
        policy: Option<String>,
    },
}

fn fence_eviction_message(policy: Option<&str>) -> String {
    let found = match policy {
        Some(policy) => format!("has `maxmemory-policy {policy}`, which may evict"),
        None => "would not tell its `maxmemory-policy` (`INFO memory` and `CONFIG GET` were refused), so it may evict".to_owned(),
    };
    format!("the Redis of fenced writes {found} the lock watermarks and tombstones that refuse stale writes (they carry an expiry; `allkeys-*` may evict the values' tokens too), and a stale holder's write would then land; set `maxmemory-policy noeviction` on that server, or accept the risk with `FencedStore::allow_eviction`; nothing was written")
}

fn fence_mismatch_message(resource: &str, lock: &str, fenced_by: Option<&str>) -> String {
    match fenced_by {
        Some(other) => format!("`{resource}` is fenced by lock `{other}`, not by `{lock}`: tokens compare only within one lock name, so nothing was compared or changed; protect each resource with one lock name"),
        None => format!("`{resource}` holds a value that was not written through `distlock::fence::redis` (a fenced value is a hash of `value`, `token` and `lock`), so the write under lock `{lock}` was refused; delete the key once, then write it only through `fence::redis::set`"),
    }
}

fn connect_message(to: &str, source: &redis::RedisError) -> String {
    if answered_not_as_redis(source) {
        format!("the server at {to} accepted the connection but did not answer as Redis ({source}): check that the URL's port is a Redis server's (6379 by default; 5432, for one, is PostgreSQL's), and that the server accepts this client (`maxclients`, `protected-mode`)")
    } else {
        format!("could not connect to Redis at {to}: {source}; check the URL, that the server is up and reachable, and the credentials")
    }
}

/// A connection that was accepted and then dropped, or answered bytes that are not Redis's
/// protocol: another service's port (a refused connection is not one: nothing listens there).
fn answered_not_as_redis(source: &redis::RedisError) -> bool {
    (source.is_connection_dropped() && !source.is_connection_refusal())
        || source.kind() == redis::ErrorKind::Parse
}

fn not_fenced_message(key: Option<&str>) -> String {
    match key {
        Some(key) => format!("lock `{key}` was taken without a fencing token: add `fenced` to the attribute (or `.fenced(true)` to the builder) to get one"),
        None => "no fencing token here: `distlock::fence()` gives the token of the lock held by the body it is called from (an annotated function or `run`), and this call chain holds no such lock (a task spawned inside the body does not inherit it: pass it the `Fence`)".to_owned(),
    }
}

fn busy_message(key: &str, waited: &Duration, held_by: &HeldBy) -> String {
    let (what, now, then) = match held_by {
        HeldBy::Owner => (
            "lock",
            "another owner holds it".to_owned(),
            "another owner held it".to_owned(),
        ),
        HeldBy::Permits { permits } => (
            "semaphore",
            format!("all {permits} permits are in use"),
            format!("all {permits} permits stayed in use"),
        ),
        HeldBy::Readers => (
            "lock",
            "readers (shared holds) or another writer hold it".to_owned(),
            "readers (shared holds) or another writer held it".to_owned(),
        ),
        HeldBy::Writer => (
            "lock",
            "a writer holds it or waits for it, so no new reader enters".to_owned(),
            "a writer held it or waited for it".to_owned(),
        ),
    };
    if waited.is_zero() {
        format!("{what} `{key}` is busy: {now} (set `wait` to wait for a release, or retry later)")
    } else {
        format!("{what} `{key}` is busy: {then} for the whole {waited:?} this caller waited (raise `wait` or retry later)")
    }
}

fn already_initialized_message(client: Option<&str>) -> String {
    match client {
        None => "distlock is already initialized: call `distlock::init` only once, at startup (use `Config::install_as(name)` for more clients)".to_owned(),
        Some(name) => format!("a distlock client named `{name}` is already installed: install each name once, at startup"),
    }
}

impl Error {
    /// True for [`Error::Busy`]: the lock (or every permit) was held by someone else.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// True for [`Error::Fenced`]: a fenced write was refused because a newer holder of the
    /// lock has written the resource already.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Fenced { .. })
    }

    /// True for [`Error::Lost`]: a held lock can no longer be guaranteed.
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost { .. })
    }

    /// A Redis error during the `op` of lock `key`: [`Error::PermissionDenied`] when Redis
    /// refused the client's user a command, key or channel ([`is_permission_denied`]),
    /// [`Error::Redis`] otherwise.
    pub(crate) fn from_redis(op: Operation, key: &str, source: redis::RedisError) -> Error {
        if is_permission_denied(&source) {
            return Error::PermissionDenied {
                op,
                key: key.to_owned(),
                refused: refusal(&source),
            };
        }
        Error::Redis {
            op,
            key: key.to_owned(),
            source,
        }
    }

    /// True when the connection failed (dropped, refused, reset) rather than timed out.
    pub(crate) fn is_connection_failure(&self) -> bool {
        matches!(self, Error::Redis { source, .. } if is_connection_failure(source))
    }

    /// True for errors that may go away on retry: timeouts ([`Error::Timeout`],
    /// [`Error::ConnectTimeout`]), connection failures (dropped, refused, reset),
    /// [`Error::NoQuorum`], and the error replies Redis gives while it cannot serve a write for
    /// a while: `LOADING` (loading its dataset after a restart), `TRYAGAIN`, `MASTERDOWN`,
    /// `CLUSTERDOWN`, `READONLY` (a failover in progress) and `NOREPLICAS`. An acquire with a
    /// `wait` retries these within its wait. Never [`Error::PermissionDenied`].
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::ConnectTimeout { .. } | Error::NoQuorum { .. } => true,
            Error::Redis { source, .. } | Error::Connect { source, .. } => is_transient(source),
            _ => false,
        }
    }
}

/// The error replies Redis gives while it cannot serve a write for a while, each expected to
/// clear without anyone changing the configuration:
/// * `LOADING`: the server is loading its dataset (after a restart);
/// * `TRYAGAIN`: a cluster slot is being migrated, try the multi-key request again;
/// * `MASTERDOWN`: a replica lost its master (`replica-serve-stale-data no`);
/// * `CLUSTERDOWN`: the cluster lost a slot's master and has not failed over yet;
/// * `READONLY`: the node was demoted to a replica (a failover in progress; the Sentinel
///   backend also finds the new master when it sees this);
/// * `NOREPLICAS`: too few replicas are linked for `min-replicas-to-write` (they link again
///   after a failover or a network split).
pub(crate) const TRANSIENT_CODES: &[&str] = &[
    "LOADING",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY",
    "NOREPLICAS",
];

/// The one classification of Redis errors that may go away on retry: a connection failure, a
/// timeout, or one of [`TRANSIENT_CODES`].
pub(crate) fn is_transient(e: &redis::RedisError) -> bool {
    is_connection_failure(e)
        || e.is_timeout()
        || e.code().is_some_and(|code| TRANSIENT_CODES.contains(&code))
}

/// True when Redis refused a command, key or channel to the client's ACL user: a `NOPERM`
/// reply, or the `ERR` a script gets for a command, key or channel its caller may not use
/// (Redis 7.0: "The user executing the script can't ...", 7.2 and later: "ACL failure in
/// script: ..."). Such a refusal lasts until an operator changes the ACL: never transient.
pub(crate) fn is_permission_denied(e: &redis::RedisError) -> bool {
    match e.code() {
        Some("NOPERM") => true,
        Some("ERR") => e.detail().is_some_and(|detail| {
            detail.starts_with("The user executing the script can't")
                || detail.starts_with("ACL failure in script")
        }),
        _ => false,
    }
}

/// Redis's refusal (see [`is_permission_denied`]) as it said it, without the script's hash and
/// line a refusal inside a script ends with.
pub(crate) fn refusal(e: &redis::RedisError) -> String {
    let code = e.code().unwrap_or("NOPERM");
    let detail = e.detail().unwrap_or("").trim();
    // `... script: <sha>, on @user_script:<line>.` at the end names the script, not the refusal.
    let detail = match detail.rfind(" script: ") {
        Some(at) if detail[at..].contains(", on @") => &detail[..at],
        _ => detail,
    };
    format!("{code} {detail}").trim_end().to_owned()
}

/// The one place Redis errors are classified: the connection failed (dropped, refused, reset)
/// before an answer came, as opposed to a timeout or an answer.
pub(crate) fn is_connection_failure(e: &redis::RedisError) -> bool {
    !e.is_timeout() && (e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal())
}

/// True when Redis answered with an error reply (as opposed to a network failure, a timeout or
/// a reply of the wrong shape): the server is there, and said no.
pub(crate) fn is_error_reply(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: &str) -> Error {
        Error::Redis {
            op: Operation::Acquire,
            key: "k".to_owned(),
            source: redis::make_extension_error(code.to_owned(), Some("detail".to_owned())),
        }
    }

    #[test]
    fn busy_says_what_held_it() {
        let busy = |held_by, waited| Error::Busy {
            key: "k".to_owned(),
            waited,
            held_by,
        };
        let cases = [
            (HeldBy::Owner, "lock `k` is busy: another owner holds it ("),
            (
                HeldBy::Permits { permits: 3 },
                "semaphore `k` is busy: all 3 permits are in use (",
            ),
            (
                HeldBy::Readers,
                "lock `k` is busy: readers (shared holds) or another writer hold it (",
            ),
            (
                HeldBy::Writer,
                "lock `k` is busy: a writer holds it or waits for it, so no new reader enters (",
            ),
        ];
        for (held_by, start) in cases {
            let text = busy(held_by, Duration::ZERO).to_string();
            assert!(text.starts_with(start), "{text}");
            assert!(text.ends_with("set `wait` to wait for a release, or retry later)"));
            let text = busy(held_by, Duration::from_secs(2)).to_string();
            assert!(
                text.contains("for the whole 2s this caller waited"),
                "{text}"
            );
            assert!(
                !text.contains("holds it") && !text.contains("in use ("),
                "{text}"
            );
        }
        assert!(busy(HeldBy::Permits { permits: 3 }, Duration::from_secs(2))
            .to_string()
            .starts_with("semaphore `k` is busy: all 3 permits stayed in use for the whole 2s"));
    }

    #[test]
    fn acl_refusals_are_permission_denied_and_never_transient() {
        let refusals = [
            ("NOPERM", "this user has no permissions to run the 'evalsha' command", "NOPERM this user has no permissions to run the 'evalsha' command"),
            ("NOPERM", "User locks has no permissions to access the 'other' key", "NOPERM User locks has no permissions to access the 'other' key"),
            ("ERR", "The user executing the script can't run this command or subcommand script: 0f3a, on @user_script:1.", "ERR The user executing the script can't run this command or subcommand"),
            ("ERR", "The user executing the script can't publish to the channel mentioned in the command script: 0f3a, on @user_script:1.", "ERR The user executing the script can't publish to the channel mentioned in the command"),
            ("ERR", "ACL failure in script: User locks has no permissions to run the 'pexpire' command script: 0f3a, on @user_script:4.", "ERR ACL failure in script: User locks has no permissions to run the 'pexpire' command"),
        ];
        for (code, detail, said) in refusals {
            let e = redis::make_extension_error(code.to_owned(), Some(detail.to_owned()));
            assert!(is_permission_denied(&e), "{e}");
            assert!(!is_transient(&e), "{e}");
            assert_eq!(refusal(&e), said);
        }
        let others = [
            (
                "ERR",
                "Error running script (call to f_0f3a): @user_script:1: wrong number of arguments",
            ),
            (
                "WRONGPASS",
                "invalid username-password pair or user is disabled.",
            ),
            ("NOAUTH", "Authentication required."),
            (
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
            ),
        ];
        for (code, detail) in others {
            let e = redis::make_extension_error(code.to_owned(), Some(detail.to_owned()));
            assert!(!is_permission_denied(&e), "{e}");
        }
        let denied = Error::PermissionDenied {
            op: Operation::Subscribe,
            key: "order:42".to_owned(),
            refused: "NOPERM this user has no permissions to access one of the channels used as arguments".to_owned(),
        };
        assert!(!denied.is_transient());
        let text = denied.to_string();
        assert!(text.starts_with("Redis refused the subscribe of lock `order:42` to the client's user: NOPERM this user has no permissions to access one of the channels"), "{text}");
        assert!(text.contains("\"Least privilege\""), "{text}");
    }

    #[test]
    fn failover_and_loading_replies_are_transient() {
        for code in TRANSIENT_CODES {
            assert!(reply(code).is_transient(), "{code}");
        }
        for code in ["NOPERM", "OOM", "ERR", "WRONGTYPE", "NOSCRIPT"] {
            assert!(!reply(code).is_transient(), "{code}");
        }
    }
}
