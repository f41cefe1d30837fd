//! Scenario 22: every waiter in its turn, per kind of hold, on one server with a replica
//! (issue 28, item 3).
//!
//! Clients (one task each, as separate processes would be) take one hold again and again: each
//! hold lasts 20–200 ms, and each acquire waits up to 3 s. One phase per kind: the lock, the
//! lock `fenced`, the lock with `min_replicas(1)`, a semaphore of one permit, one of two
//! permits, a set of two locks, and readers (half the clients) with writers (the others).
//!
//! Invariants, every phase: no more holders at once than the hold admits (one; a semaphore's
//! permits), no acquire fails otherwise than `Busy`; a fenced holder's token is above the
//! previous holder's. For the kinds whose waiters are handed the hold in their turn (the lock,
//! fenced or replicated; a permit; a set, queued at the lock it finds held; readers and
//! writers in one line): at most one acquire ends `Busy` (a whole wait without a turn) and
//! Jain's index over the clients' `Ok` counts is at least 0.9 (among the readers and among
//! the writers, for that phase).

use std::time::Duration;

use distlock::{Client, Config};
use testkit::{fairness_run, Fairness, FairnessRun, Hold, RedisServer};

use crate::common::Settings;
use crate::report::{Scenario, Tally};

/// The least Jain's index over the clients' `Ok` counts, for the kinds that take turns (and
/// over RedLock, row 20).
const MIN_JAIN: f64 = 0.9;

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let clients = s.pick(4, 6);
    let phase = Duration::from_secs(s.pick(8, 25));
    Scenario::new(
        "22",
        format!(
            "fairness per kind of hold, one server + replica: {clients} clients, holds 20-200 ms, wait 3 s, {phase:?} each: lock, fenced, min_replicas, permit of 1, 2 permits, set of 2, readers and writers"
        ),
        budget,
        move |t| run(t, clients, phase),
    )
}

async fn run(t: std::sync::Arc<Tally>, clients: usize, phase: Duration) {
    let (server, replica) = tokio::task::spawn_blocking(|| {
        let server = RedisServer::start();
        let replica = RedisServer::start_replica_of(&server);
        (server, replica)
    })
    .await
    .expect("start the server and its replica");
    let mut all: Vec<Client> = Vec::new();
    for _ in 0..clients {
        all.push(
            Config::new(server.url())
                .response_timeout(Duration::from_millis(500))
                .connect()
                .await
                .expect("a client"),
        );
    }
    let phases = [
        ("lock", Hold::Lock, true),
        ("fenced", Hold::Fenced, true),
        ("min_replicas(1)", Hold::Replicated(1), true),
        ("permit of 1", Hold::Permits(1), true),
        ("2 permits", Hold::Permits(2), true),
        ("set of 2", Hold::Set, true),
        ("readers and writers", Hold::ReadWrite, true),
    ];
    for (i, (name, hold, turns)) in phases.into_iter().enumerate() {
        let run = FairnessRun {
            duration: phase,
            hold,
            ..FairnessRun::default()
        };
        let figures = fairness_run(&all, &format!("fair-{i}"), run).await;
        check(&t, name, turns.then_some(1), &figures);
    }
    drop((replica, server));
}

/// The invariants of one phase of a fairness run, its counts and its note: no holders
/// overlapping, fenced tokens rising, no failure but `Busy`; where the waiters take turns
/// (`turns`: the most `Busy` acquires allowed), at most that many waits running out and Jain's
/// index at least [`MIN_JAIN`]; otherwise the figures are reported only.
pub(super) fn check(t: &Tally, phase: &str, turns: Option<u64>, f: &Fairness) {
    let ok: u64 = f.ok.iter().sum();
    t.ops(ok + f.busy + f.other_errors);
    t.check(f.overlaps == 0, || {
        format!("{phase}: {} holders overlapped another", f.overlaps)
    });
    t.check(f.token_regressions == 0, || {
        format!(
            "{phase}: {} tokens not above the previous holder's",
            f.token_regressions
        )
    });
    t.check(f.other_errors == 0, || {
        format!(
            "{phase}: {} acquires or releases failed: {:?}",
            f.other_errors, f.first_error
        )
    });
    if let Some(most_busy) = turns {
        t.check(f.busy <= most_busy, || {
            format!("{phase}: {} waits ran out (Busy)", f.busy)
        });
        t.check(f.jain() >= MIN_JAIN, || {
            format!("{phase}: Jain {:.3} < {MIN_JAIN} (Ok {:?})", f.jain(), f.ok)
        });
    }
    let checked = if turns.is_some() {
        ""
    } else {
        " (not checked: wakes and retries)"
    };
    t.note(format!("{phase}{checked}: {}", f.summary()));
}
