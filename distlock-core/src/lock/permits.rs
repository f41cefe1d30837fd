//! Permits: a semaphore of `n` permits is a lock of another kind. It is built, acquired,
//! waited for, renewed, held, run and released by the lock's own machinery (`acquire`, `run`,
//! `guard`, the watchdog, the waiters); what differs is the acquire request
//! (`PermitAcquireCall`), the checks of the count, and re-entry across kinds.

use crate::client::Client;
use crate::error::{Error, HeldBy, Operation};
use crate::lock::acquire::{lock, LockBuilder, Terms};
use crate::lock::guard::Hold;
use crate::wire::calls::{Acquired, PermitAcquireCall, PermitAcquired};
use crate::wire::request::ReplicaWait;

/// What one acquisition takes: the lock, or one of a semaphore's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The lock: one holder at a time.
    Mutex,
    /// One permit of a semaphore of this many.
    Permits(u32),
    /// A shared (read) hold of the lock (see `shared`).
    Read,
}

/// Starts building the acquisition of one of the `permits` permits of the semaphore `name`
/// through the default client (see [`crate::init`]): at most `permits` holders at once,
/// across every process that uses the name.
///
/// The builder is the lock's ([`LockBuilder`]) with every method: `.ttl()`, `.renew()`,
/// `.wait()`, `.fenced()`, `.min_hold()`, `.min_replicas()`, `.acquire()` (a [`crate::LockGuard`]
/// holding one permit) and `.run(body)`. Every guarantee of a lock holds per permit: each
/// holder's permit is leased on its own (a holder that dies frees its permit when its own ttl
/// runs out, not the others'), renewal extends only a live permit, a loss cancels the body of
/// `run` and reports [`Error::Lost`], a release (or a dropped guard) frees the permit and
/// wakes a waiter, and with `.fenced(true)` each permit comes with a fencing token strictly
/// greater than every earlier token for the name. Inside a body run under a permit, taking the
/// same semaphore again (same name, same client) re-enters: it takes no second permit.
///
/// Everyone using one name must agree on `permits`: an acquire that asks for another count
/// than the live holders took the semaphore with fails with [`Error::PermitsMismatch`] (the
/// count is never resized while anyone holds a permit; once every permit is released or
/// expired, the next holder's count stands). A lock ([`crate::lock()`]) and a semaphore of the
/// same name exclude each other: the second gets [`Error::Incompatible`].
///
/// `permits` is at least 1 (0 fails the acquire with [`Error::InvalidConfig`]). Over a RedLock
/// quorum ([`crate::Config::redlock`]) semaphores are not supported yet: the acquire fails with
/// [`Error::InvalidConfig`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::Error> {
/// use std::time::Duration;
/// let guard = distlock_core::semaphore("api:acme", 5)
///     .ttl(Duration::from_secs(10))
///     .renew(true)
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// assert_eq!(guard.permits(), Some(5));
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub fn semaphore(name: impl Into<String>, permits: u32) -> LockBuilder {
    lock(name).with_kind(Kind::Permits(permits))
}

impl Client {
    /// Starts building the acquisition of one permit of a semaphore through this client (see
    /// [`crate::semaphore`]).
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockBuilder {
        self.lock(name).with_kind(Kind::Permits(permits))
    }
}

/// The checks of an acquisition's kind against its client: at least one permit, and no
/// semaphore or read hold over a RedLock quorum (not built yet).
pub(crate) fn check(name: &str, kind: Kind, client: &Client) -> Result<(), Error> {
    let reason = match kind {
        Kind::Mutex => return Ok(()),
        Kind::Permits(0) => {
            format!("semaphore `{name}` asks for 0 permits; it needs at least 1")
        }
        Kind::Permits(_) if client.is_quorum() => format!(
            "semaphore `{name}`: semaphores are not supported over `Config::redlock` yet; use one server, a Redis Cluster or Sentinel"
        ),
        Kind::Permits(_) => return Ok(()),
        Kind::Read if client.is_quorum() => format!(
            "lock `{name}`: shared (read) holds are not supported over `Config::redlock` yet; use one server, a Redis Cluster or Sentinel"
        ),
        Kind::Read => return Ok(()),
    };
    Err(Error::InvalidConfig { reason })
}

/// A re-entry must take what its outer hold took: the same kind, the same count; a read
/// re-enters a write, a write never re-enters a read.
pub(crate) fn check_reentry(name: &str, outer: Kind, inner: Kind) -> Result<(), Error> {
    match (outer, inner) {
        (Kind::Permits(held), Kind::Permits(asked)) if held != asked => {
            Err(Error::PermitsMismatch {
                key: name.to_owned(),
                asked,
                held,
            })
        }
        // A read hold is never upgraded in place (two readers upgrading would deadlock).
        (Kind::Read, Kind::Mutex) => Err(Error::WriteInsideRead {
            key: name.to_owned(),
        }),
        (Kind::Mutex, Kind::Permits(_))
        | (Kind::Permits(_), Kind::Mutex | Kind::Read)
        | (Kind::Read, Kind::Permits(_)) => Err(Error::Incompatible {
            key: name.to_owned(),
        }),
        // A read inside a write re-enters the write: the exclusive hold covers reading.
        (Kind::Mutex, Kind::Mutex | Kind::Read)
        | (Kind::Read, Kind::Read)
        | (Kind::Permits(_), Kind::Permits(_)) => Ok(()),
    }
}

/// What a busy acquisition of `kind` met (`met_readers`: a write that met readers and asks
/// as `ACQUIRE_WRITE` since).
pub(crate) fn held_by(kind: Kind, met_readers: bool) -> HeldBy {
    match kind {
        Kind::Mutex if met_readers => HeldBy::Readers,
        Kind::Mutex => HeldBy::Owner,
        Kind::Permits(permits) => HeldBy::Permits { permits },
        Kind::Read => HeldBy::Writer,
    }
}

/// One permit's acquire request (`ACQUIRE_PERMIT`), as a lock's acquire reports it; another
/// count among the live holders is [`Error::PermitsMismatch`].
pub(crate) async fn try_acquire(
    hold: &Hold,
    terms: &Terms,
    permits: u32,
    (id, wait): (&[u8], Option<ReplicaWait>),
) -> Result<(Acquired, Option<usize>), Error> {
    let client = &hold.client;
    let name = hold.keys.name();
    let call = PermitAcquireCall {
        keys: &hold.keys,
        value: hold.value.as_bytes(),
        id,
        ttl: terms.ttl,
        permits,
        fenced: terms.fenced.then_some(client.config().fence_retention),
        wait,
    };
    match client.call_acked(Operation::Acquire, name, &call).await? {
        (PermitAcquired::Found(found), acked) => Ok((found, acked)),
        (PermitAcquired::Mismatch { permits: held }, _) => Err(Error::PermitsMismatch {
            key: name.to_owned(),
            asked: permits,
            held,
        }),
    }
}
