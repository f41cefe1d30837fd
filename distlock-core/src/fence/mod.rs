//! Fenced writes: the store itself refuses a holder whose lock has passed to someone else.
//!
//! A lock cannot stop a holder that was paused (a GC pause, `SIGSTOP`, a slow disk, a long
//! network stall) past its lease from writing after another holder took the lock: the paused
//! holder does not know yet, and nothing it could check before writing closes the window
//! between the check and the write. A *fencing token* closes it where the write lands: each
//! holder of a `fenced` lock gets a token strictly greater than every earlier holder's, and
//! the store keeps the highest token of the lock it has seen and refuses a lower one. With the
//! store checking, a holder that lost its lock can at worst be refused, never overwrite a
//! newer holder's data.
//!
//! * [`Fence`]: a lock's name and its token, from [`LockGuard::fence`](crate::LockGuard::fence)
//!   or, inside an annotated function or a [`run`](crate::LockBuilder::run) body,
//!   [`fence()`](crate::fence()).
//! * [`redis`](mod@redis): a [`FencedStore`](redis::FencedStore) over any redis-rs 1.x
//!   connection (the lock's Redis or another; open it through the re-export,
//!   `distlock::redis`, as a redis 0.x connection does not compile): `set`, `get`, `del` of
//!   your values, each one atomic script
//!   that lands only if no higher token of the lock has written any key of the lock there (the
//!   lock's *watermark*), and `claim`, which raises the watermark when a holder takes over.
//! * `sqlx` (feature `sqlx-postgres`): `advance(&mut tx, &fence, bound)` in your transaction,
//!   before its writes: a row per resource that only moves forward, and a holder frozen in its
//!   transaction ended after `bound`.
//!
//! ```no_run
//! # async fn connection() -> redis::aio::MultiplexedConnection { unimplemented!() }
//! # async fn demo() -> Result<(), distlock_core::Error> {
//! use std::time::Duration;
//! use distlock_core::fence::redis::FencedStore;
//!
//! // Any redis-rs connection, to any Redis; a fence can arrive up to an hour late.
//! let mut store = FencedStore::new(connection().await, Duration::from_secs(3600));
//! // `#[distributed_lock(key = "account:7", fenced)]` runs its body like this.
//! distlock_core::lock("account:7").fenced(true).run(async {
//!     let fence = distlock_core::fence()?; // this lock's name and token
//!     store.claim(&fence).await?; // older holders refused from here, on every key of the lock
//!     let key = "balance:{account:7}"; // the lock's hash tag, on every deployment
//!     let balance = store.get::<i64>(key).await?.map_or(0, |s| s.value);
//!     // Refused with `Error::Fenced` (and nothing written) if a newer holder took over since.
//!     store.set(key, balance + 100, &fence).await
//! })
//! .await??;
//! # Ok(()) }
//! ```
//!
//! # What is promised
//!
//! * **A stale token never lands.** In Redis a write carrying token `t` of lock `L` lands only
//!   if no write or [claim](redis::FencedStore::claim) with a higher token of `L` has landed
//!   in the store, on any key of `L` (the lock's watermark; with
//!   [`per_key`](redis::FencedStore::per_key): on this key), for as long as the store's window
//!   says fences arrive (next point); in Postgres an `advance` of a resource with `t` passes
//!   only if no higher token of `L` has advanced that resource. Otherwise it fails with
//!   [`Error::Fenced`](crate::Error::Fenced) `{ resource, token, seen }` and changes nothing
//!   (in SQL, the transaction can no longer commit). Writes with the same token all land: a
//!   body may write many times, and a re-entered body shares its outer hold's token.
//! * **A new holder fences the old ones out when it takes over, not at its first write.**
//!   [`FencedStore::claim`](redis::FencedStore::claim) with the new holder's fence (a new
//!   leader's: `Leadership::fence()`) raises the lock's watermark without writing a value:
//!   from then on a deposed holder is refused on every key of the lock, including keys the new
//!   holder never writes. In Postgres, `advance` first in the holder's transaction does it for
//!   its resource.
//! * **What refuses a stale fence lives as long as you say fences arrive.** You give a store
//!   the longest time a write carrying a fence can arrive after a newer holder of its lock has
//!   written or claimed there (a job queue's redelivery window, the longest pause you plan
//!   for): the lock's watermark lives that long after the lock's last write or claim in the
//!   store, a deleted value's tombstone that long after its delete (`Duration::MAX`: for
//!   ever), so a fence redelivered within that window is refused, also once the deleted
//!   value's tombstone is gone.
//! * **An eviction policy that could drop them is reported at the first write.** A store's
//!   first write (`set`, `del`, `claim`) reads the server's `maxmemory-policy`, on every
//!   master of a Cluster, and fails with [`Error::FenceEviction`](crate::Error::FenceEviction),
//!   nothing written, unless it is `noeviction`, or you said
//!   [`allow_eviction`](redis::FencedStore::allow_eviction); a policy the server will not show
//!   (an ACL refusing `INFO` and `CONFIG`) is reported too.
//! * **One rule on every deployment: the lock's hash tag.** A lock's watermark lies in the
//!   lock name's hash slot, and a Redis Cluster runs a script only on keys of one slot: keys
//!   written under lock `L` carry the hash tag `{L}` (`balance:{account:7}` under
//!   `account:7`) and are fenced per lock; any other key fails with
//!   [`Error::FenceCrossSlot`](crate::Error::FenceCrossSlot), nothing written, on one server
//!   and through Sentinel too (checked before anything is sent), so code that passes its tests
//!   on one server behaves the same on a Cluster. A [`per_key`](redis::FencedStore::per_key)
//!   store has no such rule.
//! * **A frozen Postgres holder blocks the next holder no longer than the bound.** `advance(..,
//!   bound)` has Postgres end its transaction's session once it sits idle for `bound` (a
//!   holder paused after `advance`): its row lock goes, its writes roll back and its `COMMIT`
//!   fails, and a next holder waiting on the row goes on. No `advance` waits for the row more
//!   than twice its `bound`: then [`Error::FenceLocked`](crate::Error::FenceLocked) (the row's
//!   holder is still running a statement), its transaction failed, to retry.
//! * **`advance` outside a transaction is refused**, with
//!   [`Error::FenceOutsideTransaction`](crate::Error::FenceOutsideTransaction) and nothing
//!   fenced; a `BEGIN` you issued yourself counts as a transaction.
//! * **Tokens of different locks are never compared.** The store keeps the lock's name with
//!   the token; a write under another name is refused with
//!   [`Error::FenceMismatch`](crate::Error::FenceMismatch) (a misuse: protect each resource
//!   with one lock name), never ordered against the other lock's tokens (a key outside that
//!   other lock's slot is refused before, with
//!   [`Error::FenceCrossSlot`](crate::Error::FenceCrossSlot)).
//! * **Every failure is typed.** Store errors are [`Error::Store`](crate::Error::Store); a
//!   store that refused is never reported as a failure to reach it, nor the other way round.
//!
//! A token is what the lock handed out: strictly greater than every earlier token of the name
//! while its fence floor lives, on each deployment (one server, Sentinel, Cluster, RedLock:
//! there, from a quorum's floors; see the crate docs, "Fencing tokens"). What fencing adds is
//! that the guarantee no longer depends on the lock being held when the write lands, only on
//! the tokens rising:
//!
//! | deployment | a lock lost in a pause, a partition, an expiry | a lock lost in a failover |
//! | --- | --- | --- |
//! | one server, Cluster, Sentinel | the stale holder's writes are refused | refused too, as long as the new master's fence floor (or clock) is above the old holder's token: `min_replicas` makes the floor reach a replica before the token is handed out |
//! | RedLock | refused (the token is raised on a majority of masters before it is handed out) | — (no failover: a master that restarts empty is one vote) |
//!
//! # What is not
//!
//! * **Writes that bypass the adapter are not fenced.** A plain `SET` of the key, or an SQL
//!   write in a transaction that did not call `advance`, is not checked (and a plain Redis
//!   value is refused by the next fenced write as
//!   [`Error::FenceMismatch`](crate::Error::FenceMismatch) rather than silently overwritten).
//! * **A fence arriving after the window meets only each key's own token.** Once a lock's
//!   watermark has expired (the window after the lock's last write or claim) and a deleted
//!   value's tombstone too, a stale write lands on a key no newer token has written, or that
//!   was deleted. So does it once they are gone otherwise: evicted under
//!   [`allow_eviction`](redis::FencedStore::allow_eviction), `FLUSHALL`, a restart without
//!   persistence, a failover to a replica that had not received them.
//! * **Per key, a deposed holder lands on a key no newer holder has written.**
//!   [`per_key`](redis::FencedStore::per_key) (for one lock's data spread over a Cluster's
//!   slots) keeps no watermark: each key is fenced on its own, and `claim` is refused.
//! * **Without a claim, a new holder fences the old ones out only where it has written.**
//! * **The eviction policy is read once per store** (and its clones), at the first write: a
//!   policy changed afterwards is seen by a new store only.
//! * **A Postgres holder still running a statement is not ended by the bound** (only an idle
//!   one is): the next holder gets [`Error::FenceLocked`](crate::Error::FenceLocked) at each
//!   try until that statement ends (bound your statements with `statement_timeout`). The
//!   bounds hold for the rest of the holder's transaction (`SET LOCAL`): a pause longer than
//!   the bound between its statements ends it, and each of its statements waits for a lock at
//!   most twice the bound. A `COMMIT` issued by hand inside a transaction sqlx began is not seen: sqlx still
//!   counts the transaction, and `advance` then runs outside one.
//! * **A token sequence that restarts lower is refused, not merged.** If a name's fence floor
//!   is gone (its retention passed, `FLUSHALL`, a restart without persistence) and the Redis
//!   clock is behind the clock that made the stored token, new holders get tokens below the
//!   stored one and their writes are refused with [`Error::Fenced`](crate::Error::Fenced):
//!   safe, and loud. An operator moves the store forward by hand once the old holders are
//!   known to be gone: delete the resource's fence (Redis: `DEL key` of a value whose data is
//!   no longer needed, or `HSET key token 0`, and the lock's watermark, `DEL
//!   <prefix>:{<name>}:watermark`; SQL: `DELETE FROM distlock_fences WHERE resource = '…'`),
//!   or raise the name's fence floor above the stored token (`SET <prefix>:{<name>}:fence
//!   <token>`).
//! * **The read before a write is not fenced.** A read-modify-write reads, then writes with
//!   its token: if a newer holder wrote in between, the write is refused, which is what
//!   protects the update. A read alone proves nothing about holding the lock.

pub mod redis;
#[cfg(feature = "sqlx-postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx-postgres")))]
pub mod sqlx;

use std::fmt;

/// A lock's name and one of its fencing tokens: what a fenced write carries to the store.
///
/// From [`LockGuard::fence`](crate::LockGuard::fence) (or
/// [`fence_of`](crate::LockGuard::fence_of) for one lock of a set), or inside a body run under
/// a lock from [`fence()`](crate::fence()). Tokens of one name are strictly increasing;
/// tokens of different names are never compared. [`Fence::new`] rebuilds one carried across
/// a process boundary (a job message, an RPC to the service that owns the store).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    name: String,
    token: u64,
}

impl Fence {
    /// The fence of the lock `name` with `token`, as handed out by the lock. Use it to carry a
    /// fence across a process boundary; inside the holder use [`LockGuard::fence`](crate::LockGuard::fence)
    /// or [`fence()`](crate::fence()).
    pub fn new(name: impl Into<String>, token: u64) -> Self {
        Fence {
            name: name.into(),
            token,
        }
    }

    /// The name of the lock the token belongs to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.name, self.token)
    }
}
