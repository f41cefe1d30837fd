//! Concurrency checks of a lease (shuttle; `scripts/shuttle.sh`): a guard letting its hold go
//! (dropped, or released) races the watchdog's renewal that finds the lock lost (or extends
//! the lease), the lease running out, and the tasks waiting on `lost()`.
//!
//! The guard's side is `LockGuard`'s order (`lock/guard.rs`): renewal stopped (its watchdog
//! entry removed), then, for a release, the loss looked at (`finish`'s `lost_before`), then
//! belief ended. The watchdog's side is `client/watchdog.rs`'s: a lease found lost is dropped
//! from the table without a renewal (`collect`), and a renewal that finds the lock another's
//! marks the lease lost only if its entry was still there (`renew_chunk`: "released while the
//! batch was in flight: not a loss"). Invariants, in every interleaving the checker runs:
//! * belief ends exactly once: every `lost()` waiter wakes (a stranded one is a deadlock the
//!   checker reports), each with the one reason the lease keeps;
//! * the first reason wins: a loss the watchdog recorded stays, and so does one the release
//!   saw before it let go (`Released` is never reported after a real loss was recorded), and
//!   once belief ended with `Released` no later loss replaces it;
//! * when it ended is known (`lost_at`), and not after the clock.

use std::sync::Arc;
use std::time::Duration;

use shuttle::future::{block_on, spawn};

use super::Lease;
use crate::error::LossReason;
use crate::metrics::{Held, Labels};
use crate::sync::model::{advance, caught, explore, reset_clock, Explore, Mutant};
use crate::sync::{self, time, Mutex};

/// How the guard lets go.
#[derive(Debug, Clone, Copy)]
enum LetGo {
    /// Dropped: belief ends, then the release goes in the background.
    Dropped,
    /// Released: the loss is looked at first (the release reports it), then belief ends.
    Released,
}

/// What the watchdog's renewal finds.
#[derive(Debug, Clone, Copy)]
enum Renewal {
    /// The lock another's: the lease is lost (`Stolen`), if still registered.
    Lost,
    /// Ours: the lease is extended by a ttl.
    Extended,
}

#[derive(Debug, Clone, Copy)]
struct Race {
    let_go: LetGo,
    renewal: Renewal,
    /// The clock passes the lease's first deadline at some point.
    elapses: bool,
    /// Tasks waiting on `lost()`.
    waiters: usize,
}

const TTL: Duration = Duration::from_millis(300);

fn race(r: Race) {
    reset_clock();
    let now = time::now();
    let labels = Labels {
        lock: "checked",
        kind: "lock",
    };
    let lease = Arc::new(Lease::new(now + TTL, true, Held::new(labels, false, now)));
    // The lease's entry in the watchdog's table.
    let registered = Arc::new(Mutex::new(true));
    block_on(async move {
        let waiters: Vec<_> = (0..r.waiters)
            .map(|_| {
                let lease = lease.clone();
                spawn(async move { lease.lost().await })
            })
            .collect();
        let watchdog = spawn({
            let (lease, registered) = (lease.clone(), registered.clone());
            async move {
                if lease.lost_reason().is_some() {
                    *sync::lock(&registered) = false;
                    return false;
                }
                match r.renewal {
                    Renewal::Extended => {
                        lease.extend_part(0, time::now() + TTL);
                        false
                    }
                    Renewal::Lost => {
                        let was = std::mem::take(&mut *sync::lock(&registered));
                        was && lease.mark_lost(LossReason::Stolen)
                    }
                }
            }
        });
        let clock = spawn(async move {
            if r.elapses {
                advance(TTL + Duration::from_millis(1));
            }
        });
        let guard = spawn({
            let (lease, registered) = (lease.clone(), registered.clone());
            async move {
                *sync::lock(&registered) = false;
                let before = match r.let_go {
                    LetGo::Released => lease.lost_reason(),
                    LetGo::Dropped => None,
                };
                lease.end_belief();
                let after = lease.lost_reason();
                (before, after)
            }
        });
        let marked = watchdog.await.expect("watchdog");
        clock.await.expect("clock");
        let (before, after) = guard.await.expect("guard");
        let reason = lease.lost_reason().expect("belief ended with the guard");
        for waiter in waiters {
            assert_eq!(waiter.await.expect("waiter"), reason, "one reason for all");
        }
        assert_eq!(
            after,
            Some(reason),
            "nothing replaced the reason once belief ended"
        );
        if marked {
            assert_eq!(reason, LossReason::Stolen, "the watchdog's loss was first");
        }
        if let Some(before) = before {
            assert_eq!(reason, before, "the loss the release saw was first");
        }
        if reason == LossReason::Released {
            assert!(before.is_none() && !marked, "Released after a real loss");
        }
        if !r.elapses {
            assert!(
                matches!(reason, LossReason::Released | LossReason::Stolen),
                "{reason:?} without the clock passing the deadline"
            );
        }
        let at = lease.lost_at().expect("lost_at once lost");
        assert!(at <= time::now(), "lost_at after the clock");
    });
}

/// Every race of the kinds above.
fn races(waiters: usize) -> impl Iterator<Item = Race> {
    let let_go = [LetGo::Dropped, LetGo::Released];
    let renewal = [Renewal::Lost, Renewal::Extended];
    let_go.into_iter().flat_map(move |let_go| {
        renewal.into_iter().flat_map(move |renewal| {
            [false, true].into_iter().map(move |elapses| Race {
                let_go,
                renewal,
                elapses,
                waiters,
            })
        })
    })
}

#[test]
fn shuttle_belief_ends_once_and_the_first_reason_wins() {
    for r in races(1).chain(races(2)) {
        for how in [
            Explore::Pct {
                depth: 3,
                iterations: 2_000,
            },
            Explore::Random(2_000),
        ] {
            explore(how, &r, move || race(r));
        }
    }
}

#[test]
fn shuttle_lease_mutants_are_caught() {
    let dropped = Race {
        let_go: LetGo::Dropped,
        renewal: Renewal::Lost,
        elapses: false,
        waiters: 1,
    };
    assert!(
        caught(Mutant::StateReadBeforeWaiting, 2_000, move || race(dropped)),
        "a lost() waiter that reads the state before it waits misses the end of belief"
    );
    assert!(
        caught(Mutant::BeliefOverwritesLoss, 2_000, move || race(dropped)),
        "Released written over the watchdog's loss"
    );
}
