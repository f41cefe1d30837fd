//! Fenced writes: the store itself refuses a holder whose lock has passed to someone else.
//!
//! A lock cannot stop a holder that was paused (a GC pause, `SIGSTOP`, a slow disk, a long
//! network stall) past its lease from writing after another holder took the lock: the paused
//! holder does not know yet, and nothing it could check before writing closes the window
//! between the check and the write. A *fencing token* closes it where the write lands: each
//! holder of a `fenced` lock gets a token strictly greater than every earlier holder's, and
//! the store keeps the highest token that has written each resource and refuses a lower one.
//! With the store checking, a holder that lost its lock can at worst be refused, never
//! overwrite a newer holder's data.
//!
//! * [`Fence`]: a lock's name and its token, from [`LockGuard::fence`](crate::LockGuard::fence)
//!   or, inside an annotated function or a [`run`](crate::LockBuilder::run) body,
//!   [`fence()`](crate::fence()).
//! * [`redis`](mod@redis): `set`, `get`, `del` of a value in any Redis (the lock's or another),
//!   each one atomic script that lands only if no higher token has written the key.
//! * `sqlx` (feature `sqlx-postgres`): `advance(&mut *tx, &fence)` in your transaction, before
//!   its writes: a row per resource that only moves forward.
//!
//! ```no_run
//! # async fn connection() -> redis::aio::MultiplexedConnection { unimplemented!() }
//! # async fn demo() -> Result<(), distlock_core::Error> {
//! use distlock_core::fence::redis::{get, set};
//!
//! // `#[distributed_lock(key = "balance:7", fenced)]` runs its body like this.
//! distlock_core::lock("balance:7").fenced(true).run(async {
//!     let mut conn = connection().await; // any redis-rs connection, to any Redis
//!     let fence = distlock_core::fence()?; // this lock's name and token
//!     let balance = get::<i64, _>(&mut conn, "balance:7").await?.map_or(0, |s| s.value);
//!     // Refused with `Error::Fenced` (and nothing written) if a newer holder wrote since.
//!     set(&mut conn, "balance:7", balance + 100, &fence).await
//! })
//! .await??;
//! # Ok(()) }
//! ```
//!
//! # What is promised
//!
//! * **A stale token never lands.** A write carrying token `t` of lock `L` lands only if no
//!   write with a higher token of `L` has landed on the resource; otherwise it fails with
//!   [`Error::Fenced`](crate::Error::Fenced) `{ resource, token, seen }` and changes nothing. Writes with the same
//!   token all land: a body may write many times, and a re-entered body shares its outer
//!   hold's token.
//! * **Tokens of different locks are never compared.** The store keeps the lock's name with
//!   the token; a write under another name is refused with [`Error::FenceMismatch`](crate::Error::FenceMismatch) (a misuse:
//!   protect each resource with one lock name), never ordered against the other lock's
//!   tokens.
//! * **Every failure is typed.** Store errors are [`Error::Store`](crate::Error::Store); a store that refused is
//!   never reported as a failure to reach it, nor the other way round.
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
//!   value is refused by the next fenced write as [`Error::FenceMismatch`](crate::Error::FenceMismatch) rather than
//!   silently overwritten).
//! * **A token sequence that restarts lower is refused, not merged.** If a name's fence floor
//!   is gone (its retention passed, `FLUSHALL`, a restart without persistence) and the Redis
//!   clock is behind the clock that made the stored token, new holders get tokens below the
//!   stored one and their writes are refused with [`Error::Fenced`](crate::Error::Fenced): safe, and loud. An
//!   operator moves the store forward by hand once the old holders are known to be gone:
//!   delete the resource's fence (Redis: `DEL key` of a value whose data is no longer needed,
//!   or `HSET key token 0`; SQL: `DELETE FROM distlock_fences WHERE resource = '…'`), or raise
//!   the name's fence floor above the stored token (`SET <prefix>:{<name>}:fence <token>`).
//! * **A deleted value's tombstone expires.** [`redis::del`] leaves the token behind for
//!   [`redis::TOMBSTONE_TTL`]; a holder paused longer than that after the delete could write
//!   the value back.
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
