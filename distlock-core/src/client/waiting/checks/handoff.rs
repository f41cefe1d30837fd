//! The handed waiters and the cohort under the checker (see `checks`): each waiter takes
//! `lock::waiting`'s steps for a plain lock on one server — a first attempt (skipped when
//! tasks of the client already wait), subscribe, expect a grant, wait in the client behind a
//! waiter of the cohort already queued (or queue with an attempt of its own), wait for a
//! grant naming its request, and trust only that — then holds the lock, and releases it,
//! carrying the client's next deferred waiter.

use std::sync::Arc;

use super::server::{in_flight, Found};
use super::{never, scenario, value, Ctx, Entry, Guard, Pending, Sub};
use crate::sync;
use crate::sync::model::{caught, explore, reset_clock, Explore, Mutant};
use crate::wire::calls::NextWaiter;
use crate::wire::ids::ShortId;

/// One waiting acquire (`lock::waiting::Waiter`; fields drop in its order: the queue entry
/// before the subscription).
struct Waiter {
    queued: Option<Entry>,
    pending: Option<Pending>,
    sub: Option<Sub>,
    ctx: Arc<Ctx>,
    i: usize,
    ticket: u64,
    queue_first: bool,
    last_busy: Option<ShortId>,
    carry_id: Option<ShortId>,
}

impl Waiter {
    fn new(ctx: Arc<Ctx>, i: usize) -> Self {
        let queue_first = *sync::lock(&ctx.subscribed) > 0;
        Waiter {
            queued: None,
            pending: None,
            sub: None,
            ticket: i as u64,
            ctx,
            i,
            queue_first,
            last_busy: None,
            carry_id: None,
        }
    }

    /// `Waiter::run`, without timers.
    async fn run(&mut self) -> Guard {
        loop {
            if !std::mem::take(&mut self.queue_first) && self.attempt().await == Found::Taken {
                return self.taken();
            }
            let Some(sub) = self.sub.as_mut() else {
                self.subscribe().await;
                continue;
            };
            let Some(grant) = sub.interest.wait_grant(never()).await else {
                continue;
            };
            // `wait_turn`: trusted only if it names the last busy attempt, or the release
            // that carried the waiter.
            let named = grant.named.as_deref();
            let trusted = match (self.last_busy, self.carry_id) {
                (Some(last), _) if named == Some(last.as_bytes()) => true,
                (_, Some(carry)) if named == Some(carry.as_bytes()) => {
                    sub.interest.carried().is_some()
                }
                _ => false,
            };
            if trusted {
                return self.taken();
            }
        }
    }

    /// `Waiter::attempt`: queued (`ACQUIRE_HANDED`) once subscribed, a plain `SET NX` before.
    async fn attempt(&mut self) -> Found {
        if let Some(sub) = self.sub.as_mut() {
            sub.interest.mark_seen();
        }
        let queue = self.sub.is_some();
        if queue && self.queued.is_none() {
            self.queued = Some(Entry {
                ctx: self.ctx.clone(),
                i: self.i,
                armed: true,
                deferral: None,
            });
        }
        self.pending = Some(Pending {
            ctx: self.ctx.clone(),
            i: self.i,
            armed: true,
        });
        let id = self.ctx.request_id();
        let me = value(self.i);
        in_flight().await;
        let found = match queue {
            true => self
                .ctx
                .server
                .acquire_handed(me.as_bytes(), self.ticket, id.as_bytes()),
            false => self.ctx.server.set_nx(me.as_bytes()),
        };
        in_flight().await;
        // Taken: the guard owns it; busy: nothing of it is held (one lock, one server).
        if let Some(mut pending) = self.pending.take() {
            pending.armed = false;
        }
        if let (Found::Busy, Some(sub)) = (found, self.sub.as_mut()) {
            self.last_busy = Some(id);
            sub.interest.queued();
        }
        found
    }

    /// `Waiter::taken`: the queue entry has nothing left to take out, the subscription's
    /// departure carries the cohort on.
    fn taken(&mut self) -> Guard {
        if let Some(entry) = self.queued.as_mut() {
            entry.armed = false;
        }
        if let Some(sub) = self.sub.as_mut() {
            sub.interest.took();
        }
        Guard::new(&self.ctx, self.i)
    }

    /// `Waiter::subscribe` of a handed waiter whose releases carry waiters.
    async fn subscribe(&mut self) {
        let sub = self.sub.insert(Sub::new(&self.ctx).await);
        let me = value(self.i);
        sub.interest.expect_grant(me.as_bytes());
        let ctx = &self.ctx;
        let carry_id = *self.carry_id.get_or_insert_with(|| ctx.request_id());
        let next = NextWaiter {
            value: me,
            ticket: self.ticket,
            id: carry_id,
        };
        if sub.interest.defer(next) {
            let deferral = sub.interest.deferral();
            self.queued.get_or_insert_with(|| Entry {
                ctx: self.ctx.clone(),
                i: self.i,
                armed: true,
                deferral,
            });
            self.queue_first = true;
        }
    }
}

/// One acquire, the body, and the release (`fail`: its first request is lost).
async fn acquire_and_release(ctx: Arc<Ctx>, i: usize, fail: bool) {
    let guard = {
        let mut waiter = Waiter::new(ctx, i);
        waiter.run().await
    };
    in_flight().await;
    guard.release(fail).await;
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    waiters: usize,
    cancel: &'static [usize],
    /// The holder's first release and waiter 1's are lost on the way.
    fail: bool,
}

fn check(setup: Setup) {
    reset_clock();
    let Setup {
        waiters,
        cancel,
        fail,
    } = setup;
    shuttle::future::block_on(async move {
        let held = scenario(waiters, cancel, fail, move |ctx, i| {
            acquire_and_release(ctx, i, fail && i == 1)
        })
        .await;
        for i in 1..=waiters {
            assert!(
                held.contains(&i) || cancel.contains(&i),
                "waiter {i} never held the lock: {held:?}"
            );
        }
    });
}

const SETUPS: [Setup; 4] = [
    Setup {
        waiters: 3,
        cancel: &[],
        fail: false,
    },
    Setup {
        waiters: 3,
        cancel: &[1],
        fail: false,
    },
    Setup {
        waiters: 3,
        cancel: &[2],
        fail: true,
    },
    Setup {
        waiters: 4,
        cancel: &[1, 3],
        fail: true,
    },
];

#[test]
fn shuttle_handoff_cohorts_and_cancellation_pct() {
    for setup in SETUPS {
        let pct = Explore::Pct {
            depth: 3,
            iterations: 3_000,
        };
        assert_eq!(explore(pct, move || check(setup)), 3_000);
    }
}

#[test]
fn shuttle_handoff_cohorts_and_cancellation_random() {
    for setup in SETUPS {
        assert_eq!(explore(Explore::Random(3_000), move || check(setup)), 3_000);
    }
}

#[test]
fn shuttle_handoff_mutants_are_caught() {
    for (mutant, setup, what) in [
        (
            Mutant::LeaveOvertakesCarry,
            Setup {
                waiters: 2,
                cancel: &[2],
                fail: false,
            },
            "a carried waiter's leaving overtook its queuing: the lock handed to nobody",
        ),
        (
            Mutant::NoPromotionOnFailedCarry,
            SETUPS[2],
            "a failed release's carried waiter left carried: counted out twice",
        ),
        (
            Mutant::GrantNotWoken,
            SETUPS[0],
            "a grant that does not wake its waiter",
        ),
    ] {
        assert!(
            caught(mutant, 10_000, move || check(setup)),
            "not caught: {what}"
        );
    }
}
