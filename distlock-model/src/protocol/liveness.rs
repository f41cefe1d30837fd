//! The dead waiters' toll (issue 48): what a crashed client's entries in the queue may cost a
//! live waiter behind them, and what is left to check of "no waiter stranded" once time passes.
//!
//! When the lock is let go (a live client's release lets its hold go, or a crashed client's
//! hold lapses), the live waiter with the lowest ticket, queued, with only the crashed
//! client's entries ahead of it, is owed the hold: within its recheck if every entry ahead
//! lapsed (each a crashed waiter's last look plus the life it sent, [`Setup::lapse`] at most),
//! otherwise within one grant window plus its recheck (the first of them may be granted, a
//! grant nobody takes, but its lapse sweeps the crashed client's other entries). Only the
//! crashed client (process 0) dies, so the entries ahead are one client's. A pause, a slow
//! request, a failover or a clock step while it is owed waives it (those faults delay anyone).
//! Nothing is owed before a crash (a configuration without one keeps its state count).

use super::phase::Phase;
use super::requests::ticket;
use super::{Hold, Setup, World};

/// The lock was let go at `w.now`, with `queue` (the line as it stood when the lock was let
/// go, before the release or the tick): who is owed it, and by when.
pub(super) fn let_go(s: &Setup, w: &mut World, queue: &[(String, i64)]) {
    let crashed = w.clients.iter().any(|c| c.dead.is_some());
    if s.hold_kind != Hold::Lock || w.history.owed.is_some() || !crashed {
        return;
    }
    let first = w
        .clients
        .iter()
        .filter(|c| c.dead.is_none())
        .filter_map(|c| match c.phase {
            Phase::Waiting { started, .. } => Some((ticket(s, started), c.value(), c.id)),
            _ => None,
        })
        .min();
    let Some((_, value, waiter)) = first else {
        return;
    };
    if w.clients[waiter].paused || w.clients[waiter].inflight.is_some() {
        return;
    }
    let Some(at) = queue.iter().position(|(v, _)| *v == value) else {
        return;
    };
    let mut lapsed = true;
    for (v, _) in &queue[..at] {
        match w
            .clients
            .iter()
            .find(|c| c.value() == *v)
            .and_then(|c| c.dead)
        {
            Some(lapse) => lapsed &= lapse <= w.now,
            // A live client's entry ahead: its turn comes first, not this property's case.
            None => return,
        }
    }
    let toll = if lapsed { 0 } else { s.window };
    w.history.owed = Some((waiter, w.now + toll + s.recheck, at > 0));
}

/// After a step: the owed waiter served (or gone, or the debt waived), or kept waiting past
/// its due; and a queued waiter whose look again is overdue (`stranded`).
pub(super) fn after(s: &Setup, w: &mut World, waived: bool, ticked: bool) {
    if let Some((c, due, behind_dead)) = w.history.owed {
        let cl = &w.clients[c];
        let waiting = matches!(cl.phase, Phase::Waiting { .. }) && cl.dead.is_none();
        if waived || !waiting {
            w.history.owed = None;
            if behind_dead && matches!(cl.phase, Phase::Holding { .. }) && !waived {
                w.history.served_past_dead = true;
            }
        } else if w.now > due {
            w.history.kept_waiting = true;
        }
    }
    if !ticked {
        return;
    }
    // Time passed while a live, running, queued waiter with no request out had not looked
    // again within the recheck of its last look: only a message could still wake it.
    let now = w.now;
    if w.clients.iter().any(|c| {
        c.dead.is_none()
            && !c.paused
            && c.inflight.is_none()
            && matches!(c.phase, Phase::Waiting { queued: true, last_busy: Some((_, _, looked)), .. }
                if now > looked + s.recheck)
    }) {
        w.history.stranded = true;
    }
}
