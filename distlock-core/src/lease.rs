//! The holder's view of a lease: until when the lock is guaranteed, and whether it was lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::LossReason;

/// Until when a lock taken (or renewed) at `sent_at` with `ttl` is guaranteed, counted from
/// when the command was sent. 1% of the ttl is kept back for clock-rate differences between
/// this machine and Redis.
pub(crate) fn guaranteed_until(sent_at: Instant, ttl: Duration) -> Instant {
    sent_at + ttl - ttl / 100
}

#[derive(Debug, Clone, Copy)]
struct LeaseState {
    deadline: Instant,
    lost: Option<LossReason>,
}

/// Shared by a guard and the watchdog: the lease deadline and the loss flag.
#[derive(Debug)]
pub(crate) struct Lease {
    state: watch::Sender<LeaseState>,
    /// True while the watchdog renews this lease: a passed deadline then means Redis could not
    /// be reached; otherwise the lease simply elapsed.
    renewing: AtomicBool,
}

impl Lease {
    pub(crate) fn new(deadline: Instant, renewing: bool) -> Self {
        Lease {
            state: watch::Sender::new(LeaseState {
                deadline,
                lost: None,
            }),
            renewing: AtomicBool::new(renewing),
        }
    }

    /// Moves the deadline later (never earlier); no effect once lost.
    pub(crate) fn extend(&self, deadline: Instant) {
        self.state.send_if_modified(|s| {
            if s.lost.is_none() && deadline > s.deadline {
                s.deadline = deadline;
                true
            } else {
                false
            }
        });
    }

    /// Marks the lease lost (the first reason wins). Returns true if this call marked it.
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        self.state.send_if_modified(|s| {
            if s.lost.is_none() {
                s.lost = Some(reason);
                true
            } else {
                false
            }
        })
    }

    /// The watchdog stopped renewing on purpose (hold cap reached): the lease will elapse.
    pub(crate) fn stop_renewing(&self) {
        self.renewing.store(false, Ordering::Release);
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.state.borrow().deadline
    }

    /// Why the lease is lost, if it is (a passed deadline counts, and is recorded).
    pub(crate) fn lost_reason(&self) -> Option<LossReason> {
        let s = *self.state.borrow();
        if s.lost.is_some() {
            return s.lost;
        }
        if Instant::now() >= s.deadline {
            self.mark_lost(self.elapsed_reason());
            return self.state.borrow().lost;
        }
        None
    }

    fn elapsed_reason(&self) -> LossReason {
        if self.renewing.load(Ordering::Acquire) {
            LossReason::Unreachable
        } else {
            LossReason::LeaseElapsed
        }
    }

    /// Resolves when the lease is lost: marked by the watchdog, or its deadline passed.
    pub(crate) async fn lost(&self) -> LossReason {
        let mut rx = self.state.subscribe();
        loop {
            let s = *rx.borrow_and_update();
            if let Some(reason) = s.lost {
                return reason;
            }
            tokio::select! {
                () = tokio::time::sleep_until(s.deadline) => {
                    if self.state.borrow().deadline <= s.deadline {
                        self.mark_lost(self.elapsed_reason());
                    }
                }
                changed = rx.changed() => {
                    // The sender lives in `self`, so it cannot be dropped while we wait.
                    debug_assert!(changed.is_ok());
                }
            }
        }
    }
}
