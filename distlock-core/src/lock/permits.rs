//! Permits: a semaphore of `n` permits is a lock of another kind. It is built, acquired,
//! waited for, renewed, held, run and released by the lock's own machinery (`acquire`, `run`,
//! `guard`, the watchdog, the waiters); what differs is the acquire request
//! (`SharedAcquireCall`), the checks of the count, and re-entry across kinds.
//!
//! ## Over a RedLock quorum: not a majority
//!
//! Each master keeps its own semaphore and grants at most `n` holders. A permit counts when
//! `q` of the `m` masters granted it within the validity time; `h` holders of `q` masters each
//! need `h·q` grants, at most `n·m`, so `h ≤ n·m/q`. A majority is not enough (`n` = 3 over
//! `m` = 5 masters with `q` = 3: 5 holders). At most `n` holders needs `(n+1)·q > n·m`:
//!
//! > **`q = ⌊n·m/(n+1)⌋ + 1`** (`quorum::permit_quorum`)
//!
//! One permit is a majority (a lock); 2 permits over 5 masters need 4; many permits tend to
//! every master. The price is availability: a semaphore needs `q` masters up (2 permits over 5
//! masters keep working with one master down, not two), where a lock needs a majority.
//!
//! * **Acquire**: `ACQUIRE_PERMIT` on every master, counted by `q` (`Quorate` for
//!   `SharedAcquireCall`); a master whose live holders agreed on another count fails the
//!   acquire with [`Error::PermitsMismatch`] at once. Busy (or undecided) attempts release
//!   what a minority granted, ordered after any late grant (`stragglers`), as a lock's do.
//! * **Renewal**: a permit's renewal counts only when `q` masters renewed it
//!   (`RenewItem::permits`): renewed by fewer, its lease is no longer guaranteed (the holder
//!   is told, as for a lock renewed by less than a majority).
//! * **Fencing**: the token comes from the quorum's fence floors as a lock's (`fence`): read
//!   from a majority after the acquire, raised on a majority before it is handed out. A token
//!   is strictly above every token handed out before its acquire started, and no two permits
//!   get the same token even when their acquires overlap (a raise counts only where it found
//!   every floor of its majority below its token; see `fence`).
//! * **Waiting**: a waiter is woken by each release on any master and otherwise looks again
//!   when the first lease it met runs out; there is no FIFO queue (the RedLock queue,
//!   `ACQUIRE_QUEUED`, is the lock's only), so a waiter may be overtaken.
//! * **Release**: by majority, as a lock's (releasing never lets a holder in early; what a
//!   master still holds runs out with its lease).

use crate::client::Client;
use crate::error::{Error, HeldBy, Operation};
use crate::lock::acquire::{lock, LockBuilder, Terms};
use crate::lock::guard::Hold;
use crate::wire::calls::{Acquired, Shared, SharedAcquireCall, SharedAcquired};
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
/// `permits` is at least 1 (0 fails the acquire with [`Error::InvalidConfig`]).
///
/// Over a RedLock quorum ([`crate::Config::redlock`]) a permit is taken, and renewed, by
/// `⌊permits·masters/(permits+1)⌋ + 1` masters, not by a majority (each master grants at most
/// `permits`; with fewer, more than `permits` holders could each find enough masters): one
/// permit needs a majority, 2 of 5 masters need 4, many permits nearly every master. So a
/// semaphore tolerates fewer masters down than a lock (2 permits over 5 masters: one down,
/// not two; with more down the acquire fails with [`Error::NoQuorum`], or waits). Waiters
/// there retry on each release and on the first lease's end, without the lock's FIFO queue.
/// Fencing tokens stay unique per name there too, each above every token handed out before
/// its acquire started.
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

/// The checks of an acquisition's kind against its client: at least one permit.
pub(crate) fn check(name: &str, kind: Kind) -> Result<(), Error> {
    match kind {
        Kind::Permits(0) => Err(Error::InvalidConfig {
            reason: format!("semaphore `{name}` asks for 0 permits; it needs at least 1"),
        }),
        Kind::Mutex | Kind::Permits(_) | Kind::Read => Ok(()),
    }
}

impl Kind {
    /// The `kind` label of this acquisition's metrics (a set's is `set`, see `acquire`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "lock",
            Kind::Permits(_) => "permit",
            Kind::Read => "read",
        }
    }

    /// The semaphore's count of a permit; 0 for a lock and a read hold (see `RenewItem`).
    pub(crate) fn permits(self) -> u32 {
        match self {
            Kind::Permits(n) => n,
            Kind::Mutex | Kind::Read => 0,
        }
    }
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
    let call = SharedAcquireCall {
        keys: &hold.keys,
        value: hold.value.as_bytes(),
        id,
        ttl: terms.ttl,
        shared: Shared::Permits(permits),
        fenced: terms.fenced.then_some(client.config().fence_retention),
        wait,
    };
    match client.call_acked(Operation::Acquire, name, &call).await? {
        (SharedAcquired::Found(found), acked) => Ok((found, acked)),
        (SharedAcquired::Mismatch { permits: held }, _) => Err(Error::PermitsMismatch {
            key: name.to_owned(),
            asked: permits,
            held,
        }),
    }
}
