//! Permits: one of a semaphore's `n` permits is a kind of hold. It is built, acquired,
//! waited for, renewed, held, run and released by the common machinery (the builder, the wait
//! loop, the hold, `run`, the watchdog, the waiters); what is the permit's own is here: the
//! acquire request (`SharedAcquireCall` with `Shared::Permits`), the check of the count, and
//! re-entry.
//!
//! ## Over a RedLock quorum: not a majority
//!
//! Each master keeps its own semaphore and grants at most `n` holders. A permit counts when
//! `q` of the `m` masters granted it within the validity time; `h` holders of `q` masters each
//! need `h·q` grants, at most `n·m`, so `h ≤ n·m/q`. A majority is not enough (`n` = 3 over
//! `m` = 5 masters with `q` = 3: 5 holders). At most `n` holders needs `(n+1)·q > n·m`:
//!
//! > **`q = ⌊n·m/(n+1)⌋ + 1`** (`count::permit_quorum`)
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

use crate::client::waiting::queue::Place;
use crate::error::Error;
use crate::lock::kind::shared;
use crate::lock::kind::variant::{Kind, Target};
use crate::lock::terms::Terms;
use crate::wire::calls::{Acquired, Shared, SharedAcquired};
use crate::wire::request::ReplicaWait;

/// The check of a semaphore's count: at least one permit.
pub(crate) fn check(name: &str, permits: u32) -> Result<(), Error> {
    match permits {
        0 => Err(Error::InvalidConfig {
            reason: format!("semaphore `{name}` asks for 0 permits; it needs at least 1"),
        }),
        _ => Ok(()),
    }
}

/// What re-enters a permit held by the call chain: the same semaphore with the same count
/// (no second permit is taken); another count is [`Error::PermitsMismatch`], any other kind
/// incompatible.
pub(crate) fn admits(name: &str, held: u32, inner: Kind) -> Result<(), Error> {
    match inner {
        Kind::Permits(asked) if asked == held => Ok(()),
        Kind::Permits(asked) => Err(Error::PermitsMismatch {
            key: name.to_owned(),
            asked,
            held,
        }),
        Kind::Exclusive | Kind::Read | Kind::Set => Err(Error::Incompatible {
            key: name.to_owned(),
        }),
    }
}

/// One permit's acquire request (`ACQUIRE_PERMIT`, in its turn from a waiter's queued
/// `place`), as a lock's acquire reports it; another count among the live holders is
/// [`Error::PermitsMismatch`].
pub(crate) async fn send(
    target: Target<'_>,
    terms: &Terms,
    (permits, place): (u32, Place),
    request: (&[u8], Option<ReplicaWait>),
) -> Result<(Acquired, Option<usize>), Error> {
    let turn = place.turn(target.client.publishes_sharded());
    let asked = (Shared::Permits(permits), turn);
    match shared::send(target, terms, asked, request).await? {
        (SharedAcquired::Found(found), acked) => Ok((found, acked)),
        (SharedAcquired::Mismatch { permits: held }, _) => Err(Error::PermitsMismatch {
            key: target.key().name().to_owned(),
            asked: permits,
            held,
        }),
    }
}
