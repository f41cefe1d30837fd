//! The waiters that wake and retry under the checker (see `checks`): each takes
//! `lock::wait_loop`'s steps for a waiter no release hands the lock to (RedLock, sets over
//! several slot groups) — a first attempt (skipped when tasks of the client already wait),
//! subscribe, take its turn in the client's line, and then, holding the turn: mark the counts
//! seen, attempt, wait for a message after them — and releases the lock when it has it.

use std::sync::Arc;

use super::redis_side::{in_flight, Found};
use super::{never, scenario, value, Ctx, Guard, Pending, Sub};
use crate::sync;
use crate::sync::model::{caught, explore, reset_clock, Explore, Mutant};

/// One waiting acquire (`lock::wait_loop::Waiter`, its fields in drop order).
struct Waiter {
    pending: Option<Pending>,
    sub: Option<Sub>,
    ctx: Arc<Ctx>,
    i: usize,
    queue_first: bool,
}

impl Waiter {
    async fn run(&mut self, asked: &std::sync::Mutex<Vec<usize>>) -> Guard {
        loop {
            if !std::mem::take(&mut self.queue_first) && self.attempt().await == Found::Taken {
                return Guard::new(&self.ctx, self.i);
            }
            match self.sub.as_mut() {
                None => {
                    let sub = self.sub.insert(Sub::new(&self.ctx).await);
                    // Asking is the first poll of `take_turn`, which joins the line at once
                    // (no scheduling point in between): the order asked is the line's.
                    sync::lock(asked).push(self.i);
                    assert!(sub.interest.take_turn(never()).await, "no wait runs out");
                }
                Some(sub) => sub.interest.wait_until(never(), 0).await,
            }
        }
    }

    async fn attempt(&mut self) -> Found {
        if let Some(sub) = self.sub.as_mut() {
            sub.interest.mark_seen();
        }
        self.pending = Some(Pending {
            ctx: self.ctx.clone(),
            i: self.i,
            armed: true,
        });
        in_flight().await;
        let found = self.ctx.server.set_nx(value(self.i).as_bytes());
        in_flight().await;
        if let Some(mut pending) = self.pending.take() {
            pending.armed = false;
        }
        found
    }
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    waiters: usize,
    cancel: &'static [usize],
}

fn check(setup: Setup) {
    reset_clock();
    let Setup { waiters, cancel } = setup;
    shuttle::future::block_on(async move {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let line = asked.clone();
        let held = scenario(waiters, cancel, false, move |ctx, i| {
            let asked = line.clone();
            async move {
                let queue_first = *sync::lock(&ctx.subscribed) > 0;
                let mut waiter = Waiter {
                    pending: None,
                    sub: None,
                    ctx,
                    i,
                    queue_first,
                };
                let guard = waiter.run(&asked).await;
                drop(waiter);
                in_flight().await;
                guard.release(false).await;
            }
        })
        .await;
        for i in 1..=waiters {
            assert!(
                held.contains(&i) || cancel.contains(&i),
                "waiter {i} never held the lock: {held:?}"
            );
        }
        // FIFO: the waiters that took a turn held the lock in the order they asked for it.
        let asked = sync::lock(&*asked).clone();
        let asked: Vec<usize> = asked.into_iter().filter(|i| !cancel.contains(i)).collect();
        let in_turn: Vec<usize> = held.into_iter().filter(|i| asked.contains(i)).collect();
        assert_eq!(in_turn, asked, "held out of turn");
    });
}

const SETUPS: [Setup; 3] = [
    Setup {
        waiters: 3,
        cancel: &[],
    },
    Setup {
        waiters: 3,
        cancel: &[1],
    },
    Setup {
        waiters: 4,
        cancel: &[2],
    },
];

#[test]
fn shuttle_turns_fifo_wakes_and_cancellation() {
    for setup in SETUPS {
        let pct = Explore::Pct {
            depth: 3,
            iterations: 3_000,
        };
        explore(pct, &setup, move || check(setup));
        explore(Explore::Random(3_000), &setup, move || check(setup));
    }
}

#[test]
fn shuttle_turns_mutants_are_caught() {
    for (mutant, setup, what) in [
        (
            Mutant::TurnKeptOnDrop,
            SETUPS[1],
            "a cancelled waiter kept its turn, and the next is stranded",
        ),
        (
            Mutant::TurnBarges,
            SETUPS[0],
            "a waiter that retries out of turn passes one that asked before it",
        ),
        (
            Mutant::BaselineAfterAttempt,
            Setup {
                waiters: 1,
                cancel: &[],
            },
            "a release between the attempt and the wait is a lost wake-up",
        ),
    ] {
        assert!(
            caught(mutant, 5_000, move || check(setup)),
            "not caught: {what}"
        );
    }
}
