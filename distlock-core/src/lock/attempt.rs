//! What an attempt's take becomes: a guard, its lease and its renewal (`into_guard`), or, too
//! few replicas acknowledging it, a release and `Error::Unreplicated` (the attempt itself is
//! the kind's: `Kind::attempt`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::watchdog::Renewal;
use crate::error::Error;
use crate::lease::{deadline_after, guaranteed_until, millis_ceil, Lease};
use crate::lock::guard::{Acquisition, LockGuard};
use crate::lock::hold::{Hold, ReleaseOnDrop};
use crate::lock::terms::Terms;
use crate::metrics::Held;

/// A take that too few replicas acknowledged: released again (in the background if the
/// release cannot be answered now), and the error that says how many did.
pub(crate) async fn unreplicated(hold: Hold, acknowledged: usize, required: usize) -> Error {
    let key = hold.key().name().to_owned();
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
        Held::new(terms.label, !reentry, sent_at),
    );
    // The first renewal of a handed-over lock is due a third of the way through what is left.
    let left_of_window = granted.map(|_| deadline.saturating_duration_since(Instant::now()));
    // A hold of several locks (a set's): one part of the lease per lock, each renewed on its
    // own; one lock's lease is the lease.
    let lease = Arc::new(match hold.keys().len() {
        1 => lease,
        parts => lease.with_parts(parts),
    });
    // Where masters switch (Sentinel) or server clocks are watched for steps, every outermost
    // lease is also confirmed on the server after a switch or a step (see `watchdog`).
    let confirm = !reentry && hold.client.follows_switches();
    let mut renewals = Vec::new();
    let mut renewal = None;
    if terms.renew || confirm || granted.is_some() {
        // One renewal per lock (a set's each extend their own part of the lease).
        for (part, keys) in hold.keys().iter().enumerate() {
            let id = hold.client.start_renewal(Renewal {
                item: hold.kind.renew_item(keys, &hold.value, terms.ttl),
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
