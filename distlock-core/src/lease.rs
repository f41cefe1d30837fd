//! The holder's view of a lease: until when the lock is guaranteed, and whether it was lost;
//! and the limits every lease duration is checked against.

use std::fmt;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, LossReason};
use crate::metrics::Held;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{self, mutant, time, Mutex};

#[cfg(all(test, shuttle))]
mod checks;

/// The shortest lease (`ttl`) a lock accepts: 100 ms.
///
/// Below it, the safety margin (see [`LEASE_MARGIN`]) would eat most of the lease and renewal
/// would have to run every few milliseconds. The attribute refuses a shorter literal `ttl` at
/// compile time.
pub const MIN_TTL: Duration = Duration::from_millis(100);

/// The longest lease (`ttl`) a lock accepts, and the longest `min_hold` and fence retention:
/// 30 days. Longer waits (`wait`) and hold caps (`max_hold`) are accepted and mean "forever".
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The fixed part of the safety margin: a lease is trusted until `ttl - (LEASE_MARGIN +
/// ttl / 100)` after its command was sent. The fixed part covers timer rounding (tokio timers
/// have millisecond resolution) and scheduling delay; the 1% covers clock-rate differences
/// between this machine and Redis.
pub const LEASE_MARGIN: Duration = Duration::from_millis(5);

/// Renewals per ttl: a renewed lease is extended every ttl/3, so two renewals in a row can
/// fail (or be late) before the lease runs out.
const RENEWALS_PER_TTL: u32 = 3;

/// How often the watchdog renews a lease of `ttl`.
pub(crate) fn renewal_interval(ttl: Duration) -> Duration {
    ttl / RENEWALS_PER_TTL
}

/// Until when a lock taken (or renewed) at `sent_at` with `ttl` is guaranteed, counted from
/// when the command was sent, minus the safety margin.
pub(crate) fn guaranteed_until(sent_at: Instant, ttl: Duration) -> Instant {
    let margin = LEASE_MARGIN + ttl / 100;
    sent_at + ttl.saturating_sub(margin)
}

/// About 30 years: what "forever" means for a deadline (as in tokio's own far future).
pub(crate) const FOREVER: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `at + d`, saturating at "forever" (30 years from `at`), so `Duration::MAX` means forever
/// instead of an overflow panic.
pub(crate) fn deadline_after(at: Instant, d: Duration) -> Instant {
    at + d.min(FOREVER)
}

/// How long a name's fence floor (and a leader election's record) is kept: the configured
/// retention, never less than the ttl of the hold that raised it.
pub(crate) fn fence_kept(retention: Duration, ttl: Duration) -> Duration {
    retention.max(ttl)
}

/// Whole milliseconds of `d`, rounded up, saturating (Redis takes 64-bit millisecond counts).
pub(crate) fn millis_ceil(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// Checks a lease-like duration against [`MIN_TTL`]`..=`[`MAX_TTL`].
pub(crate) fn check_ttl<S: fmt::Display>(
    what: impl FnOnce() -> S,
    ttl: Duration,
) -> Result<(), Error> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::InvalidConfig {
            reason: format!(
                "{} is {ttl:?}, but it must be between {MIN_TTL:?} and {MAX_TTL:?} (30 days)",
                what()
            ),
        });
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct LeaseState {
    deadline: Instant,
    lost: Option<LossReason>,
    /// When it was lost: the deadline, for a lease that ran out; the moment it was marked,
    /// otherwise.
    lost_at: Option<Instant>,
}

/// Shared by a guard and the watchdog: the lease deadline and the loss flag.
#[derive(Debug)]
pub(crate) struct Lease {
    state: Mutex<LeaseState>,
    /// Woken on every change of `state` (waiters of [`Lease::lost`]).
    changed: Notify,
    /// True while the watchdog renews this lease; false without `renew`, or once the hold cap's
    /// last renewal is sent: the lease is then meant to elapse, and a passed deadline is
    /// [`LossReason::LeaseElapsed`] (unless refused or unreplicated).
    renewing: AtomicBool,
    /// Evidence, gathered while the lease was still guaranteed, that Redis did not answer its
    /// renewals: the last attempt failed on the way (no reply within the response timeout, a
    /// broken connection, too few RedLock masters heard), or the attempt in flight went
    /// unanswered for half of what the lease had left. Cleared by any answer. A passed deadline
    /// with it is [`LossReason::Unreachable`]; without it the renewals were not attempted in
    /// time (the process stalled), which is [`LossReason::LeaseElapsed`].
    unanswered: AtomicBool,
    /// The last renewal attempt got an error reply (Redis answered but refused): a passed
    /// deadline is then reported as [`LossReason::Refused`].
    refused: AtomicBool,
    /// The last renewal was not acknowledged by enough replicas: a passed deadline is then
    /// reported as [`LossReason::Unreplicated`].
    unreplicated: AtomicBool,
    /// `distlock_held` and `distlock_lost_total` (feature `metrics`; zero-sized without it).
    held: Held,
    /// A set of locks held together (`lock::kind::set`): each lock's own deadline, renewed on its
    /// own (in a cluster, in calls of their own); the lease's deadline is the earliest. Empty
    /// for one lock (no allocation).
    parts: Mutex<Box<[Instant]>>,
}

impl Lease {
    pub(crate) fn new(deadline: Instant, renewing: bool, held: Held) -> Self {
        Lease {
            state: Mutex::new(LeaseState {
                deadline,
                lost: None,
                lost_at: None,
            }),
            changed: Notify::new(),
            renewing: AtomicBool::new(renewing),
            unanswered: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            unreplicated: AtomicBool::new(false),
            held,
            parts: Mutex::new(Box::default()),
        }
    }

    /// The lease of a set of `parts` locks held together, each renewed on its own
    /// ([`Lease::extend_part`]): guaranteed until the earliest of their deadlines.
    pub(crate) fn with_parts(self, parts: usize) -> Self {
        let deadline = self.deadline();
        *sync::lock(&self.parts) = vec![deadline; parts].into_boxed_slice();
        self
    }

    /// A renewal of part `part` (one lock of a set; for a lease of one lock, the lease)
    /// reaches `deadline`: that part's deadline moves later (never earlier), and the lease's
    /// deadline to the earliest of the parts'.
    pub(crate) fn extend_part(&self, part: usize, deadline: Instant) {
        let earliest = {
            let mut parts = sync::lock(&self.parts);
            match parts.get_mut(part) {
                Some(at) => {
                    *at = (*at).max(deadline);
                    parts.iter().copied().min().unwrap_or(deadline)
                }
                None => deadline,
            }
        };
        self.extend(earliest);
    }

    /// Moves the deadline later (never earlier); no effect once lost.
    pub(crate) fn extend(&self, deadline: Instant) {
        self.update(|s| {
            if s.lost.is_none() && deadline > s.deadline {
                s.deadline = deadline;
                true
            } else {
                false
            }
        });
    }

    /// Applies `change` to the state; wakes the waiters of [`Lease::lost`] if it returns true.
    fn update(&self, change: impl FnOnce(&mut LeaseState) -> bool) -> bool {
        let changed = change(&mut sync::lock(&self.state));
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }

    fn state(&self) -> LeaseState {
        *sync::lock(&self.state)
    }

    /// Marks the lease lost (the first reason wins). Returns true if this call marked it.
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        self.update(|s| {
            if s.lost.is_none() {
                s.lost = Some(reason);
                s.lost_at = Some(time::now().min(s.deadline));
                // Counted before the waiters of `lost()` wake.
                self.held.lost(reason);
                true
            } else {
                false
            }
        })
    }

    /// The holder lets the hold go (a release, a resign, a dropped guard): belief ends now,
    /// before the release is sent, so before anyone else can be handed the lock. Every waiter of
    /// [`Lease::lost`] wakes with [`LossReason::Released`] (unless the lease was lost before:
    /// the first reason stays, and a deadline already passed is that loss). Not a loss: counted
    /// by no lost metric.
    pub(crate) fn end_belief(&self) {
        if self.lost_reason().is_some() && !mutant!(BeliefOverwritesLoss) {
            return;
        }
        self.update(|s| {
            if s.lost.is_none() || mutant!(BeliefOverwritesLoss) {
                s.lost = Some(LossReason::Released);
                s.lost_at = Some(time::now());
                true
            } else {
                false
            }
        });
    }

    /// The lease's metrics (feature `metrics`).
    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    /// The watchdog stopped renewing on purpose (hold cap reached): the lease will elapse.
    pub(crate) fn stop_renewing(&self) {
        self.renewing.store(false, Ordering::Release);
    }

    /// Records whether the last renewal attempt was refused by Redis (an error reply).
    pub(crate) fn set_refused(&self, refused: bool) {
        self.refused.store(refused, Ordering::Release);
    }

    /// A renewal attempt went unanswered (it failed on the way, or is still in flight past its
    /// bound): recorded only while the lease is still guaranteed, since a process that
    /// stalled past its deadline finds its attempts timed out when it runs again, and that is
    /// the stall's doing, not Redis'.
    pub(crate) fn renewal_unanswered(&self) {
        let s = self.state();
        if s.lost.is_none() && time::now() < s.deadline {
            self.unanswered.store(true, Ordering::Release);
        }
    }

    /// Redis answered a renewal attempt (whatever the answer).
    pub(crate) fn renewal_answered(&self) {
        self.unanswered.store(false, Ordering::Release);
    }

    /// Records whether the last renewal was acknowledged by too few replicas.
    pub(crate) fn set_unreplicated(&self, unreplicated: bool) {
        self.unreplicated.store(unreplicated, Ordering::Release);
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.state().deadline
    }

    /// Why the lease is lost, if it is (a passed deadline counts, and is recorded).
    pub(crate) fn lost_reason(&self) -> Option<LossReason> {
        let s = self.state();
        if s.lost.is_some() {
            return s.lost;
        }
        if time::now() >= s.deadline {
            self.mark_lost(self.elapsed_reason());
            return self.state().lost;
        }
        None
    }

    /// `Ok(())` while the lease is guaranteed, otherwise [`Error::Lost`] for the lock `key`
    /// with why: what every `ensure_held` answers.
    pub(crate) fn ensure_held(&self, key: &str) -> Result<(), Error> {
        match self.lost_reason() {
            None => Ok(()),
            Some(reason) => Err(Error::Lost {
                key: key.to_owned(),
                reason,
            }),
        }
    }

    /// When the lease was lost (or let go), if it was.
    pub(crate) fn lost_at(&self) -> Option<Instant> {
        self.lost_reason()?;
        self.state().lost_at
    }

    /// Why a lease whose deadline passed is lost, by what its renewals met (see
    /// [`LossReason`]'s variants: this is where they are told apart).
    fn elapsed_reason(&self) -> LossReason {
        if self.unreplicated.load(Ordering::Acquire) {
            LossReason::Unreplicated
        } else if self.refused.load(Ordering::Acquire) {
            LossReason::Refused
        } else if self.renewing.load(Ordering::Acquire) && self.unanswered.load(Ordering::Acquire) {
            LossReason::Unreachable
        } else {
            // Renewed, and no attempt failed: none was made in time, so the process (or the
            // client's runtime) did not run — a stall.
            LossReason::LeaseElapsed
        }
    }

    /// Resolves when the lease is lost: marked by the watchdog, or its deadline passed.
    pub(crate) async fn lost(&self) -> LossReason {
        loop {
            // Registered before the state is read: a change after the read wakes it.
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let s = self.state();
            if let Some(reason) = s.lost {
                return reason;
            }
            // A deadline already passed (the process stalled) is a loss now, not after a
            // timer round trip: `run` polls this before the body.
            if let Some(reason) = self.lost_reason() {
                return reason;
            }
            if mutant!(StateReadBeforeWaiting) {
                // Registered only after reading (the read here gives the checker the moment
                // in between, where a real thread may be preempted).
                let _ = self.state();
                changed.set(self.changed.notified());
            }
            // Biased: the order is fixed (each branch looks at the state again), so a check
            // replays it.
            tokio::select! {
                biased;
                () = time::sleep_until(s.deadline) => {
                    if self.state().deadline <= s.deadline {
                        self.mark_lost(self.elapsed_reason());
                    }
                }
                () = changed => {}
            }
        }
    }
}
