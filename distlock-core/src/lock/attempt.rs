//! One acquire attempt (the request for each kind of lock and deployment, retried once on a
//! dropped connection), and what a take becomes: a guard and its lease (`into_guard`), or,
//! too few replicas acknowledging it, a release and `Error::Unreplicated`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::watchdog::Renewal;
use crate::error::{Error, Operation};
use crate::lease::{deadline_after, guaranteed_until, millis_ceil, Lease};
use crate::lock::acquire::Terms;
use crate::lock::guard::{Acquisition, Hold, LockGuard, ReleaseOnDrop};
use crate::lock::permits::{self, Kind};
use crate::lock::queue::Place;
use crate::lock::shared;
use crate::metrics::Held;
use crate::wire::calls::{
    AcquireCall, Acquired, FencedAcquireCall, HandedAcquireCall, QueuedAcquireCall, RenewItem,
    Shared,
};

/// A take that too few replicas acknowledged: released again (in the background if the
/// release cannot be answered now), and the error that says how many did.
pub(crate) async fn unreplicated(hold: Hold, acknowledged: usize, required: usize) -> Error {
    let key = hold.keys.name().to_owned();
    tracing::warn!(%key, acknowledged, required, "too few replicas acknowledged the lock; releasing it");
    // Armed until the release is answered: cancelled or failed, it runs in the background.
    let mut pending = ReleaseOnDrop::new(hold.clone());
    match hold.release(None).await {
        Ok(_) => drop(pending.disarm()),
        Err(error) => {
            tracing::debug!(%key, %error, "release of an unacknowledged lock failed; retrying in the background")
        }
    }
    Error::Unreplicated {
        key,
        acknowledged,
        required,
    }
}

pub(crate) fn into_guard(
    hold: Hold,
    token: Option<u64>,
    reentry: bool,
    terms: &Terms,
    (sent_at, switches): (Instant, u64),
    started: Instant,
    granted: Option<Duration>,
) -> LockGuard {
    let waited_ms = millis_ceil(started.elapsed());
    tracing::debug!(?token, reentry, waited_ms, "acquired");
    if let (false, Some(min)) = (reentry, terms.min_hold) {
        hold.keep_until(deadline_after(sent_at, min));
    }
    // A lock a release handed over (`granted`: its window) is ours for the window from the
    // waiter's last attempt the release came after; the watchdog extends it to the ttl early
    // in the window (and, without `renew`, no further: the cap is the ttl).
    let deadline = guaranteed_until(sent_at, granted.unwrap_or(terms.ttl));
    let lease = Lease::new(
        deadline,
        terms.renew || granted.is_some(),
        Held::new(terms.label, !reentry),
    );
    // The first renewal of a handed-over lock is due a third of the way through what is left.
    let left_of_window = granted.map(|_| deadline.saturating_duration_since(Instant::now()));
    // A set's lease: one part per lock, each renewed on its own.
    let lease = Arc::new(match hold.set.len() {
        0 => lease,
        parts => lease.with_parts(parts),
    });
    // Where masters switch (Sentinel) or server clocks are watched for steps, every outermost
    // lease is also confirmed on the server after a switch or a step (see `watchdog`).
    let confirm = !reentry && hold.client.follows_switches();
    let mut renewals = Vec::new();
    let mut renewal = None;
    if terms.renew || confirm || granted.is_some() {
        // One renewal per lock (a set's each extend their own part of the lease).
        for (part, keys) in hold.all_keys().iter().enumerate() {
            let id = hold.client.start_renewal(Renewal {
                item: RenewItem {
                    key: keys.lock().into(),
                    value: hold.value.as_str().into(),
                    ttl: terms.ttl,
                    permits: hold.kind.permits(),
                },
                renew: terms.renew || granted.is_some(),
                switches,
                name: keys.name().into(),
                replicas: terms.min_replicas,
                hold_until: match (terms.renew, granted) {
                    (false, Some(_)) => Some(deadline_after(sent_at, terms.ttl)),
                    _ => terms.max_hold.map(|cap| deadline_after(sent_at, cap)),
                },
                lease: lease.clone(),
                part,
                granted: left_of_window,
                cap_is_ttl: !terms.renew && granted.is_some(),
            });
            match renewal {
                None => renewal = Some(id),
                Some(_) => renewals.push(id),
            }
        }
    }
    LockGuard::new(Acquisition {
        hold,
        token,
        reentry,
        lease,
        renewal,
        renewals,
        acquired_at: sent_at,
    })
}

/// One acquire round trip (two if the connection dropped): a plain `SET NX PX GET`, or the
/// fenced script, with the `WAIT` of `min_replicas`; over a RedLock quorum the queued script
/// (plain or fenced), with the waiter's `ticket` (and whether to queue it); elsewhere a queued
/// waiter's attempts, to whom a release may hand the lock, as `ACQUIRE_HANDED` (`place`); a permit's or a
/// read hold's own script; a write that meets readers (or met them in an earlier attempt,
/// `met_readers`) is sent (again) as `ACQUIRE_WRITE` (see `shared`). `terms.wait`: the
/// caller waits when the lock is busy, so ask for its ttl too. Returns what it found and, when
/// replicas were asked for, how many acknowledged and how many the `WAIT` required
/// (`ALL_REPLICAS` resolved).
pub(crate) async fn try_acquire(
    hold: &Hold,
    terms: &Terms,
    queued: Place,
    met_readers: &mut bool,
) -> Result<(Acquired, Option<(usize, usize)>), Error> {
    let client = &hold.client;
    let replicas = client.replica_wait(terms.min_replicas);
    let readers = *met_readers;
    let id = client.new_request_id();
    let mut found = send_acquire(hold, terms, queued, id.as_bytes(), readers).await?;
    // A write whose plain or fenced acquire met a key that is not a string (readers, maybe):
    // asked again, and from now on, as a write where readers may hold the lock.
    if terms.kind == Kind::Mutex && !readers && found.0 == Acquired::Incompatible {
        *met_readers = true;
        let id = client.new_request_id();
        found = send_acquire(hold, terms, queued, id.as_bytes(), true).await?;
    }
    let (found, acked) = found;
    let required = replicas.map_or(0, |w| w.replicas);
    Ok((found, replicas.map(|_| (acked.unwrap_or(0), required))))
}

/// One acquire request of [`try_acquire`] (`readers`: a write that met readers, see
/// `shared`), retried once with the same request if the connection dropped.
pub(crate) async fn send_acquire(
    hold: &Hold,
    terms: &Terms,
    place: Place,
    id: &[u8],
    readers: bool,
) -> Result<(Acquired, Option<usize>), Error> {
    let client = &hold.client;
    let name = hold.keys.name();
    let replicas = client.replica_wait(terms.min_replicas);
    let send = || async {
        if let Kind::Permits(permits) = terms.kind {
            permits::try_acquire(hold, terms, permits, (id, replicas)).await
        } else if terms.kind == Kind::Read {
            shared::try_acquire(hold, terms, Shared::Read, (id, replicas)).await
        } else if readers {
            let write = Shared::Write {
                waits: terms.wait.is_some(),
            };
            shared::try_acquire(hold, terms, write, (id, replicas)).await
        } else if let (Some(window), true) = (place.window, place.queue) {
            let call = HandedAcquireCall {
                keys: &hold.keys,
                value: hold.value.as_bytes(),
                id,
                ttl: terms.ttl,
                ticket: place.ticket,
                window,
                sharded: client.sharded_pubsub(),
            };
            client.call_acked(Operation::Acquire, name, &call).await
        } else if client.is_quorum() {
            let call = QueuedAcquireCall {
                keys: &hold.keys,
                value: hold.value.as_bytes(),
                id,
                ttl: terms.ttl,
                fenced: terms.fenced.then_some(client.config().fence_retention),
                ticket: place.ticket,
                queue: place.queue,
            };
            client.call_acked(Operation::Acquire, name, &call).await
        } else if terms.fenced {
            let call = FencedAcquireCall {
                keys: &hold.keys,
                value: hold.value.as_bytes(),
                id,
                ttl: terms.ttl,
                retention: client.config().fence_retention,
                wait: replicas,
            };
            client.call_acked(Operation::Acquire, name, &call).await
        } else {
            let call = AcquireCall {
                keys: &hold.keys,
                owner: &hold.value,
                id,
                ttl: terms.ttl,
                want_pttl: terms.wait.is_some(),
                wait: replicas,
            };
            client.take(name, &call).await
        }
    };
    // A dropped connection fails fast and the connection reconnects: retry once, with the same
    // value so a reply lost after the lock was taken reads as our own take. A timeout is not
    // retried (the caller's bound is one response timeout); the caller's cleanup releases the
    // lock in case the request was applied.
    match send().await {
        Err(error) if error.is_connection_failure() => {
            tracing::debug!(%error, "acquire reply lost; retrying with the same value");
            send().await
        }
        other => other,
    }
}
