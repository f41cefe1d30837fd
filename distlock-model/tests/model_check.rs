//! The protocol model checked: each configuration exhaustively (breadth first, every state up
//! to its horizon: the depth reached is printed), then random walks beyond (longer horizons,
//! more clients, every fault at once). `DISTLOCK_MODEL_DEEP=1` (`scripts/model.sh`) checks
//! bigger configurations and walks longer.
//!
//! Two overlaps are the docs' own admissions, and the checker must find them (the docs'
//! honesty, checked): a failover to a replica that missed an unacknowledged lock (without
//! `min_replicas`), and a server clock stepped forward past the margin. And one fairness
//! limit: a newcomer's first attempt (`SET NX`, no script; `ACQUIRE_PERMIT` without the queue's
//! keys) may take a lock or a permit that an expiry freed before the waiters queued for it look
//! again (`fifo, newcomers included`).

mod common;

use common::{check, violated, walk, Checked};
use distlock_model::protocol::{Hold, Setup};

fn deep() -> bool {
    std::env::var_os("DISTLOCK_MODEL_DEEP").is_some()
}

/// The horizon (ms) of a configuration: `ci` in CI, `deeper` with `DISTLOCK_MODEL_DEEP`.
fn horizon(ci: i64, deeper: i64) -> i64 {
    if deep() {
        deeper
    } else {
        ci
    }
}

/// Checks `setup` exhaustively: no safety property violated but those in `admitted`, and the
/// model reaches a second hold (it is not vacuous).
fn holds(name: &str, setup: Setup, admitted: &[&str]) -> Checked {
    let checked = check(name, setup, None);
    let unexpected: Vec<&str> = violated(&checked)
        .into_iter()
        .filter(|p| !admitted.contains(p))
        .collect();
    let paths: Vec<String> = checked
        .shortest
        .iter()
        .filter(|(p, _)| unexpected.contains(p))
        .map(|(p, path)| format!("{p}: {path}"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{name}: violated {unexpected:?}; shortest counterexamples:\n{}",
        paths.join("\n")
    );
    assert!(
        checked.found.contains(&"two holds in turn"),
        "{name}: the model never reached a second hold: it checks nothing"
    );
    checked
}

#[test]
fn a_lock_with_its_queue_handoff_expiry_pauses_and_slow_requests() {
    let base = Setup::default();
    let c = holds("lock, 2 clients", base.clone(), &[]);
    assert!(
        c.found.contains(&"a lock handed over"),
        "no handoff reached"
    );
    assert!(c.depth >= 30 && c.unique > 40_000, "shallower than stated");
    holds(
        "lock, 2 clients, 2 acquisitions each",
        Setup {
            rounds: 2,
            horizon: horizon(10, 13),
            ..base.clone()
        },
        &["fifo, newcomers included"],
    );
    holds(
        "lock, 2 clients, 2 acquisitions each, 2 pauses",
        Setup {
            rounds: 2,
            pauses: 2,
            horizon: horizon(9, 10),
            ..base.clone()
        },
        &["fifo, newcomers included"],
    );
    holds(
        "lock, renewed, held past its ttl",
        Setup {
            renew: 1,
            hold: 4,
            ..base.clone()
        },
        &[],
    );
    holds(
        "lock, a finer grain (6 ms lease, 4 ms window)",
        Setup {
            ttl: 6,
            window: 4,
            wait: 10,
            horizon: 13,
            ..base.clone()
        },
        &[],
    );
    if deep() {
        holds(
            "lock, 3 clients",
            Setup {
                clients: 3,
                horizon: 11,
                ..base
            },
            &["fifo, newcomers included"],
        );
    }
}

#[test]
fn permits_and_readers_never_believed_with_an_incompatible_hold() {
    let permits = holds(
        "semaphore of 2, 3 clients",
        Setup {
            hold_kind: Hold::Permits(2),
            clients: 3,
            horizon: horizon(9, 11),
            ..Setup::default()
        },
        &[],
    );
    assert!(
        permits.found.contains(&"two holds at once"),
        "never two permits at once"
    );
    holds(
        "a reader and a writer",
        Setup {
            hold_kind: Hold::ReadWrite { readers: 1 },
            ..Setup::default()
        },
        &[],
    );
    let readers = holds(
        "two readers and a writer",
        Setup {
            hold_kind: Hold::ReadWrite { readers: 2 },
            clients: 3,
            horizon: horizon(9, 11),
            ..Setup::default()
        },
        &[],
    );
    assert!(
        readers.found.contains(&"two holds at once"),
        "never two readers at once"
    );
}

/// `fifo` for permits and for readers and writers: the configurations above check it with a
/// pause (two permits of three clients, two readers and a writer); these add one permit for
/// three, and two writers with a reader, where each kind of waiter can be passed by each.
#[test]
fn permits_and_readers_take_their_turns_in_arrival_order() {
    holds(
        "semaphore of 1, 3 clients, no pause",
        Setup {
            hold_kind: Hold::Permits(1),
            clients: 3,
            horizon: 10,
            pauses: 0,
            ..Setup::default()
        },
        &[],
    );
    // A permit freed by expiry may go to a newcomer's first attempt (`ACQUIRE_PERMIT` without
    // the queue's keys) before the queued waiters look again, as a lock may.
    let c = holds(
        "semaphore of 1, 3 clients, a holder paused",
        Setup {
            hold_kind: Hold::Permits(1),
            clients: 3,
            horizon: 7,
            ..Setup::default()
        },
        &["fifo, newcomers included"],
    );
    assert!(
        c.found.contains(&"fifo, newcomers included"),
        "a newcomer's first attempt takes a permit freed by expiry before the queued waiters \
         look again: the checker must find it"
    );
    holds(
        "two writers and a reader, no pause",
        Setup {
            hold_kind: Hold::ReadWrite { readers: 1 },
            clients: 3,
            horizon: 10,
            pauses: 0,
            ..Setup::default()
        },
        &[],
    );
    holds(
        "two writers and a reader, a pause",
        Setup {
            hold_kind: Hold::ReadWrite { readers: 1 },
            clients: 3,
            horizon: 7,
            ..Setup::default()
        },
        &["fifo, newcomers included"],
    );
}

#[test]
fn a_set_of_two_excludes_each_of_its_locks() {
    holds(
        "a set of two and the first lock alone",
        Setup {
            hold_kind: Hold::Sets,
            ..Setup::default()
        },
        &[],
    );
    let sets = holds(
        "a set of two and each lock alone",
        Setup {
            hold_kind: Hold::Sets,
            clients: 3,
            horizon: horizon(8, 10),
            ..Setup::default()
        },
        &[],
    );
    assert!(
        sets.found.contains(&"two holds at once"),
        "never both locks held apart at once"
    );
}

#[test]
fn fencing_tokens_rise_and_no_stale_write_lands() {
    let fenced = Setup {
        fenced: true,
        ..Setup::default()
    };
    holds("fenced lock", fenced.clone(), &[]);
    if deep() {
        // In CI the random walks cover fenced holders taking several turns.
        holds(
            "fenced lock, 2 acquisitions each",
            Setup {
                rounds: 2,
                horizon: 10,
                ..fenced
            },
            &["fifo, newcomers included"],
        );
    }
}

#[test]
fn leader_terms_rise_and_belief_ends_with_the_hold() {
    holds(
        "leader election",
        Setup {
            fenced: true,
            leader: true,
            horizon: horizon(11, 13),
            ..Setup::default()
        },
        &[],
    );
}

#[test]
fn a_failover_keeps_exclusion_with_min_replicas() {
    let failover = Setup {
        replica: true,
        min_replicas: true,
        ..Setup::default()
    };
    holds(
        "failover, min_replicas",
        Setup {
            horizon: horizon(10, 13),
            ..failover.clone()
        },
        &[],
    );
    holds(
        "failover, min_replicas, fenced and renewed",
        Setup {
            fenced: true,
            renew: 1,
            hold: 4,
            pauses: 0,
            ..failover
        },
        &[],
    );
}

#[test]
fn a_failover_without_min_replicas_can_lose_a_lock_as_the_docs_admit() {
    let c = check(
        "failover, no min_replicas",
        Setup {
            replica: true,
            pauses: 0,
            ..Setup::default()
        },
        Some("mutual exclusion"),
    );
    assert!(
        c.found.contains(&"mutual exclusion"),
        "the docs admit that a failover to a replica that missed a lock can let two holders \
         believe: the checker must find it"
    );
}

#[test]
fn a_clock_step_back_keeps_exclusion_and_tokens_rising() {
    holds(
        "clock stepped back, fenced",
        Setup {
            fenced: true,
            clock_step: -3,
            horizon: horizon(10, 13),
            ..Setup::default()
        },
        &[],
    );
    holds(
        "clock stepped back, leader",
        Setup {
            fenced: true,
            leader: true,
            clock_step: -3,
            pauses: 0,
            ..Setup::default()
        },
        &[],
    );
}

#[test]
fn a_clock_step_forward_past_the_margin_overlaps_as_the_docs_admit() {
    holds(
        "clock stepped forward within the margin",
        Setup {
            clock_step: 2,
            ..Setup::default()
        },
        &[],
    );
    let c = check(
        "clock stepped forward past the margin",
        Setup {
            clock_step: 3,
            pauses: 0,
            ..Setup::default()
        },
        Some("mutual exclusion"),
    );
    assert!(
        c.found.contains(&"mutual exclusion"),
        "the docs admit that a server clock stepping forward expires locks early: the \
         checker must find the overlap"
    );
}

/// The drift bound of the docs (`LEASE_MARGIN + ttl / 100`: a lease clock within 1% of the
/// server's rate), scaled to the model's lease: its 1 ms margin of a 4 ms lease is the allowance
/// of a 25% bound. Each client's lease clock runs slow or fast by it.
const DRIFT_BOUND: i64 = 25;

#[test]
fn lease_clocks_drifting_within_the_bound_keep_exclusion() {
    let c = holds(
        "lease clocks 25% slow or fast",
        Setup {
            drift: DRIFT_BOUND,
            ..Setup::default()
        },
        &[],
    );
    assert!(
        c.found.contains(&"a lock handed over"),
        "no handoff reached with drifting clocks"
    );
    holds(
        "lease clocks 25% slow or fast, renewed, fenced",
        Setup {
            drift: DRIFT_BOUND,
            fenced: true,
            renew: 1,
            hold: 4,
            pauses: 0,
            ..Setup::default()
        },
        &[],
    );
}

#[test]
fn a_reentered_lock_is_released_at_its_last_exit_only() {
    let c = holds(
        "lock, re-entered once",
        Setup {
            reentry: true,
            ..Setup::default()
        },
        &[],
    );
    assert!(
        c.found.contains(&"a lock re-entered"),
        "no re-entry reached: the check is vacuous"
    );
}

#[test]
fn a_newcomer_passes_queued_waiters_only_at_a_lock_an_expiry_freed() {
    let three = Setup {
        clients: 3,
        horizon: 9,
        ..Setup::default()
    };
    holds(
        "3 clients, no pause",
        Setup {
            pauses: 0,
            ..three.clone()
        },
        &[],
    );
    let c = check(
        "3 clients, a holder paused past its lease",
        three,
        Some("fifo, newcomers included"),
    );
    assert!(
        c.found.contains(&"fifo, newcomers included"),
        "a newcomer's first attempt (SET NX) takes a lock freed by expiry before the queued \
         waiters look again: the checker must find it"
    );
}

/// Issue 48: a client that crashes with waiters queued (and a waiter its releases carry) costs
/// a live waiter behind them one grant window at most, and none once their entries lapsed.
/// Clients 0 and 1 are one process, which crashes once; client 2 lives. Deep: a fourth client,
/// a live holder whose release finds the crashed client's two entries ahead of the live
/// waiter (`tests/mutations.rs` replays the counterexample without the sweep).
#[test]
fn a_crashed_clients_waiters_cost_a_live_waiter_one_window_at_most() {
    let crashed = Setup {
        clients: 3,
        siblings: 2,
        crashes: 1,
        pauses: 0,
        lapse: 4,
        horizon: 10,
        ..Setup::default()
    };
    let c = holds(
        "a crashed client's two waiters and a live one",
        crashed,
        &[],
    );
    assert!(
        c.found.contains(&"a live waiter served past dead waiters"),
        "no live waiter served past a crashed client's entries: the check is vacuous"
    );
    if deep() {
        let c = holds(
            "a crashed client's two waiters behind a live holder, and a live waiter",
            Setup {
                clients: 4,
                siblings: 2,
                crashes: 1,
                pauses: 0,
                horizon: 10,
                ..Setup::default()
            },
            &["fifo, newcomers included"],
        );
        assert!(c.found.contains(&"a live waiter served past dead waiters"));
    }
}

#[test]
fn random_walks_beyond_the_exhaustive_depth() {
    let states = if deep() { 3_000_000 } else { 300_000 };
    let everything = Setup {
        clients: 3,
        rounds: 3,
        renew: 1,
        hold: 3,
        wait: 12,
        horizon: 40,
        fenced: true,
        leader: true,
        replica: true,
        min_replicas: true,
        clock_step: -4,
        pauses: 3,
        ..Setup::default()
    };
    let found = walk("every fault, 3 clients, 40 ms", everything, 41, states);
    let unexpected: Vec<&str> = found
        .into_iter()
        .filter(|p| *p != "fifo, newcomers included")
        .collect();
    assert!(
        unexpected.is_empty(),
        "random walks violated {unexpected:?}"
    );
    let plain = Setup {
        clients: 3,
        rounds: 4,
        ttl: 6,
        window: 4,
        wait: 14,
        horizon: 60,
        pauses: 4,
        drift: DRIFT_BOUND,
        reentry: true,
        ..Setup::default()
    };
    let found = walk(
        "plain lock, 3 clients, 60 ms, lease clocks drifting, re-entered",
        plain,
        7,
        states,
    );
    let unexpected: Vec<&str> = found
        .into_iter()
        .filter(|p| *p != "fifo, newcomers included")
        .collect();
    assert!(
        unexpected.is_empty(),
        "random walks violated {unexpected:?}"
    );
}

/// A lock taken past the line leaves its waiters to their own look again (the one case where a
/// release may leave a lock free with waiters queued: `History::taken_past_line`). Found by the
/// checker with two pauses (two clients, two acquisitions each: `Setup { rounds: 2, pauses: 2,
/// horizon: 10 }`, breadth first) when the waiters' marks came: client 1 takes the lock; client
/// 0 queues (`ACQUIRE_HANDED` marks the lock) and pauses; client 1's release is slow and arrives
/// after the lock expired (`-2`, nothing let go); client 1's second acquisition takes the free
/// lock with `SET NX` (the newcomer an expiry lets in, unmarked: the mark went with the expired
/// key); its release finds its own lock unmarked and only deletes it, with client 0 still
/// queued. Client 0 looks again at its recheck (due at the expiry it waited for; at most
/// `HANDED_RECHECK`, 1 s, in the runtime), where before the marks the release handed it the
/// lock while it was paused.
#[test]
fn a_release_of_a_lock_taken_past_the_line_leaves_its_waiters_to_their_recheck() {
    use distlock_model::protocol::{Act::*, Phase, Protocol};
    use stateright::Model;

    let model = Protocol(Setup {
        rounds: 2,
        pauses: 2,
        horizon: 10,
        ..Setup::default()
    });
    let path = [
        Act(0),
        Act(1),
        Act(1),
        Act(0),
        Receive(0),
        Act(0),
        Pause(0),
        Receive(1),
        Tick,
        Tick,
        ActSlow(1),
        Tick,
        Tick,
        Tick,
        Apply(1),
        Receive(1),
        Act(1),
        Act(1),
        Receive(1),
        Tick,
        Tick,
    ];
    let mut w = model.init_states().remove(0);
    for act in path {
        w = model.next_state(&w, act).expect("a step");
    }
    // Client 1 holds its second acquisition, taken unmarked; client 0 is queued, paused.
    assert_eq!(w.server.holder(w.now), Some("d2:p1:c1r1"));
    assert!(w.server.queued(w.now, &w.clients[0].value()).is_some());
    assert!(matches!(
        w.clients[0].phase,
        Phase::Waiting { queued: true, .. }
    ));
    assert!(!w.history.left_free);
    // Taken by a `SET NX` past the line (the expiry let it in): unmarked.
    assert_eq!(w.history.taken_past_line.as_deref(), Some("d2:p1:c1r1"));
    // Client 1 releases: nobody marked the lock, so the release deletes it unread and client
    // 0 stays queued at a free lock, with its look again scheduled (not stranded).
    let w = model.next_state(&w, Act(1)).expect("a step");
    assert_eq!(w.server.holder(w.now), None);
    assert!(w.server.queued(w.now, &w.clients[0].value()).is_some());
    assert!(!w.history.left_free && !w.history.stranded);
}
