//! Every property can fail: each seeded bug (a mutation of the scripts' model or of the
//! client's) is caught by the checker, which finds the property it breaks violated with a
//! counterexample (breadth first: the shortest). A property no mutation breaks would check
//! nothing; `docs/protocol.md` lists each property with its mutations.

#[path = "mutations/cases.rs"]
mod cases;
mod common;

use cases::{cases, crashed_behind_a_holder};
use distlock_model::protocol::{Hold, Setup};
use distlock_model::scripts::Mutations;

/// A mutation is caught only if the checker finds its property violated *and* the same
/// configuration without it (`Case::clean`: same horizon) holds that property to the same
/// depth (every state within as many steps as the counterexample, breadth first): a case whose
/// clean configuration fails there too would catch nothing.
#[test]
fn every_mutation_is_caught() {
    let mut missed = Vec::new();
    for case in cases() {
        let clean = case.clean();
        let checked = common::check(case.name, case.setup, Some(case.breaks));
        let Some(&(_, depth)) = checked.lengths.iter().find(|(p, _)| *p == case.breaks) else {
            missed.push(format!(
                "{} (should break {:?}; found {:?})",
                case.name, case.breaks, checked.found
            ));
            continue;
        };
        // The counterexample's last state is `depth` steps past the initial one.
        let name = format!("{} (clean, to depth {})", case.name, depth + 1);
        let clean = common::check_to(&name, clean, depth + 1);
        if common::violated(&clean).contains(&case.breaks) {
            missed.push(format!(
                "{}: the configuration without the bug violates {:?} too",
                case.name, case.breaks
            ));
        }
    }
    assert!(
        missed.is_empty(),
        "mutations the checker did not catch:\n{}",
        missed.join("\n")
    );
}

/// The shortest counterexample of a writer's turn skipping its queue check passes a writer;
/// this path (found by the checker counting readers passed only) has it pass a reader: the
/// writer holding paused past its lease, the reader queued behind it, the other writer queued
/// after the reader takes the lock the expiry freed. `fifo` catches it; the real script hands
/// the lock to the reader first.
#[test]
fn a_writer_passing_a_queued_reader_is_caught() {
    use distlock_model::protocol::{Act::*, Phase, Protocol};
    use stateright::Model;

    let path = [
        Act(1),
        Act(1),
        Pause(1),
        Tick,
        Tick,
        Tick,
        Act(0),
        Act(0),
        Receive(0),
        Act(0),
        Receive(0),
        Tick,
        Act(0),
        Receive(0),
        Act(2),
        Act(2),
        Receive(2),
        Act(2),
        Receive(2),
        Tick,
        Act(2),
    ];
    let run = |mutations: Mutations| {
        let model = Protocol(Setup {
            hold_kind: Hold::ReadWrite { readers: 1 },
            clients: 3,
            horizon: 10,
            mutations,
            ..Setup::default()
        });
        let mut w = model.init_states().remove(0);
        let (last, before) = path.split_last().expect("a path");
        for act in before {
            w = model.next_state(&w, act.clone()).expect("a step");
        }
        assert!(!w.history.passed, "passed before the last step");
        // The reader queued in Redis before the writer, which is queued too; the other
        // writer paused, not queued.
        let ticket = |c: usize| w.server.queued(w.now, &w.clients[c].value());
        assert!(ticket(0).is_some() && ticket(2).is_some() && ticket(0) < ticket(2));
        assert!(matches!(
            w.clients[1].phase,
            Phase::Waiting { queued: false, .. }
        ));
        let w = model.next_state(&w, last.clone()).expect("a step");
        (w.server.holder(w.now).map(str::to_owned), w.history.passed)
    };
    let (holder, passed) = run(Mutations {
        skip_queue_check: true,
        ..Mutations::default()
    });
    assert_eq!(
        holder.as_deref(),
        Some("d2:p2:c2r0"),
        "the writer took the lock"
    );
    assert!(
        passed,
        "a writer passing a queued reader is not caught by `fifo`"
    );
    let (holder, passed) = run(Mutations::default());
    assert_ne!(
        holder.as_deref(),
        Some("d2:p2:c2r0"),
        "the real script let the writer pass"
    );
    assert!(!passed);
}

#[test]
fn every_safety_property_is_broken_by_some_mutation() {
    let broken: Vec<&str> = cases().iter().map(|c| c.breaks).collect();
    for property in common::SAFETY {
        // The newcomers' FIFO is broken by a fault the docs admit (see model_check.rs).
        if *property == "fifo, newcomers included" {
            continue;
        }
        assert!(
            broken.contains(property),
            "no mutation breaks {property:?}: it checks nothing"
        );
    }
}

/// "No sweep" in CI: the checker's shortest counterexample in `crashed_behind_a_holder` (found
/// breadth first there, 1.8 million states: `DISTLOCK_MODEL_DEEP` runs that search), replayed.
/// Client 2 holds; the crashed client's waiters (0 and 1) are queued, then client 3; client 2's
/// release grants client 0's entry (dead), whose lapse sweeps client 1's with the scripts as
/// they are: client 3 holds within a window and its recheck. Without the sweep client 1's
/// entry is granted too, a second window.
#[test]
fn a_crashed_clients_second_entry_is_swept_not_granted() {
    use distlock_model::protocol::{Act::*, Protocol};
    use stateright::Model;

    let path = [
        Act(0),
        Act(1),
        Act(2),
        Act(2),
        Act(0),
        Receive(0),
        Act(0),
        Act(1),
        Receive(1),
        Act(1),
        Receive(2),
        Crash,
        Tick,
        Tick,
        Act(3),
        Act(3),
        Receive(3),
        Act(3),
        Receive(3),
        Act(2),
        Receive(2),
        Hear(3),
        Tick,
        Tick,
        Act(3),
        Receive(3),
        Tick,
        Act(3),
        Receive(3),
        Tick,
        Act(3),
        Receive(3),
        Hear(3),
        Tick,
        Tick,
        Tick,
    ];
    // The path up to client 2's release, which lets the lock go with the crashed client's two
    // entries ahead of client 3 (the same with or without the sweep); then every client does
    // what is due, as soon as it is due, to the horizon.
    let run = |mutations: Mutations| {
        let model = Protocol(Setup {
            mutations,
            ..crashed_behind_a_holder()
        });
        let mut w = model.init_states().remove(0);
        for act in path.clone() {
            w = model.next_state(&w, act).expect("a step");
            if w.history.owed.is_some() {
                break;
            }
        }
        let owed = w.history.owed.is_some();
        loop {
            let mut acts = Vec::new();
            model.actions(&w, &mut acts);
            let due = acts
                .iter()
                .find(|a| matches!(a, Act(_) | Receive(_) | Hear(_) | Apply(_)))
                .or_else(|| acts.iter().find(|a| **a == Tick));
            let Some(act) = due.cloned() else { break };
            w = model.next_state(&w, act).expect("a step");
        }
        (owed, w.history.kept_waiting, w.history.served_past_dead)
    };
    let (owed, kept, _) = run(Mutations {
        no_sweep: true,
        ..Mutations::default()
    });
    assert!(
        owed && kept,
        "without the sweep the live waiter is kept waiting"
    );
    let (owed, kept, served) = run(Mutations::default());
    assert!(owed && !kept && served, "the sweep serves it in time");
}
