//! RedLock in the protocol model (`distlock_model::protocol::quorum`): two clients over three
//! masters, one of which may go down and come back empty, the masters' clocks apart; mutual
//! exclusion by majority, tokens rising across majorities, a leader's terms rising — each
//! configuration exhaustively (breadth first, to its horizon: the depth is printed), and each
//! seeded bug caught with a counterexample. `docs/protocol.md` lists them.

mod common;

use common::{check_model, violated, walk_model, Checked};
use distlock_model::protocol::quorum::{Quorum, QuorumBugs, QuorumSetup};
use distlock_model::scripts::Mutations;

/// The safety properties of the RedLock model.
const SAFETY: &[&str] = &[
    "mutual exclusion",
    "tokens rise",
    "terms rise",
    "no stale write lands",
];

fn deep() -> bool {
    std::env::var_os("DISTLOCK_MODEL_DEEP").is_some()
}

/// Fenced, a master going down once and back empty after more than a ttl, master 0's clock
/// 3 ms ahead (past the 1 ms margin: one master's lease runs out early, a majority's does not).
fn skewed_fenced() -> QuorumSetup {
    QuorumSetup {
        fenced: true,
        skew: vec![3],
        ..QuorumSetup::default()
    }
}

/// Checks `setup` exhaustively: no safety property violated, and each of `reached` (coverage)
/// reached.
fn holds(name: &str, setup: QuorumSetup, reached: &[&str]) -> Checked {
    let checked = check_model(name, Quorum(setup), None);
    let paths: Vec<String> = checked
        .shortest
        .iter()
        .map(|(p, path)| format!("{p}: {path}"))
        .collect();
    assert!(
        violated(&checked).is_empty(),
        "{name}: violated {:?}; shortest counterexamples:\n{}",
        violated(&checked),
        paths.join("\n")
    );
    for property in reached {
        assert!(
            checked.found.contains(property),
            "{name}: never reached {property:?}: the check is vacuous there"
        );
    }
    checked
}

#[test]
fn a_majority_excludes_through_a_master_restarted_empty_and_skewed_clocks() {
    let c = holds(
        "RedLock x3, fenced, a master down and back empty, one clock +3 ms",
        skewed_fenced(),
        &[
            "two holds in turn",
            "a hold after a master went down",
            "a raise lost",
        ],
    );
    assert!(c.depth >= 30 && c.unique > 500_000, "shallower than stated");
}

#[test]
fn leader_terms_count_once_a_majority_wrote_them() {
    holds(
        "RedLock x3, leader",
        QuorumSetup {
            leader: true,
            ..skewed_fenced()
        },
        &["two holds in turn", "a hold after a master went down"],
    );
}

#[test]
fn slow_requests_and_paused_clients_keep_exclusion() {
    // A slow request (a master applies it late, the call may give it up) or a pause, without
    // the master going down: with it too, the states outgrow the machine (over 6 GB at a
    // 10 ms horizon); the random walks take them all together.
    let crashes = 0;
    let horizon = if deep() { 12 } else { 10 };
    holds(
        "RedLock x3, fenced, a slow request",
        QuorumSetup {
            slow: 1,
            crashes,
            horizon,
            ..skewed_fenced()
        },
        &["two holds in turn"],
    );
    holds(
        "RedLock x3, fenced, a pause",
        QuorumSetup {
            pauses: 1,
            crashes,
            horizon,
            ..skewed_fenced()
        },
        &["two holds in turn"],
    );
}

#[test]
fn random_walks_beyond_the_exhaustive_depth() {
    let states = if deep() { 3_000_000 } else { 200_000 };
    let everything = QuorumSetup {
        rounds: 3,
        wait: 12,
        horizon: 40,
        leader: true,
        pauses: 2,
        slow: 2,
        ..skewed_fenced()
    };
    let found = walk_model(
        "RedLock x3, every fault, 3 acquisitions, 40 ms",
        Quorum(everything),
        17,
        states,
    );
    assert!(found.is_empty(), "random walks violated {found:?}");
}

/// The masters' clocks all apart (3 ms, 1 ms and 0 ahead): an offset does not shorten a
/// lease (each master expires a key by its own clock, `ttl` after it set it), but the tokens are
/// each master's clock: the token rounds keep them rising.
#[test]
fn tokens_rise_with_every_master_s_clock_apart() {
    holds(
        "RedLock x3, fenced, clocks +3, +1, 0 ms",
        QuorumSetup {
            skew: vec![3, 1],
            crashes: 0,
            ..skewed_fenced()
        },
        &["two holds in turn", "a raise lost"],
    );
}

/// One seeded bug: its name, the model it is checked in, the property it must break.
struct Case {
    name: &'static str,
    setup: QuorumSetup,
    breaks: &'static str,
}

fn cases() -> Vec<Case> {
    let b = QuorumBugs::default;
    vec![
        Case {
            name: "the token round raises the floor on one master only",
            setup: QuorumSetup {
                bugs: QuorumBugs {
                    raise_one_master: true,
                    ..b()
                },
                ..skewed_fenced()
            },
            breaks: "tokens rise",
        },
        Case {
            name: "an acquire counts as taken without a majority",
            setup: QuorumSetup {
                bugs: QuorumBugs {
                    take_without_majority: true,
                    ..b()
                },
                ..QuorumSetup::default()
            },
            breaks: "mutual exclusion",
        },
        Case {
            name: "two masters restarted empty at once, not after a ttl (a leader's record \
                   and floor lost on a majority)",
            setup: QuorumSetup {
                leader: true,
                restart_after: 0,
                crashes: 2,
                ..skewed_fenced()
            },
            breaks: "terms rise",
        },
        Case {
            name: "a master restarted empty at once, not after a ttl",
            setup: QuorumSetup {
                restart_after: 0,
                crashes: 2,
                ..QuorumSetup::default()
            },
            breaks: "mutual exclusion",
        },
        Case {
            name: "FENCED_WRITE does not compare with the watermark (RedLock's tokens)",
            setup: QuorumSetup {
                mutations: Mutations {
                    write_without_watermark: true,
                    ..Mutations::default()
                },
                crashes: 0,
                pauses: 1,
                ..skewed_fenced()
            },
            breaks: "no stale write lands",
        },
    ]
}

#[test]
fn every_redlock_mutation_is_caught() {
    let mut missed = Vec::new();
    for case in cases() {
        let checked = check_model(case.name, Quorum(case.setup), Some(case.breaks));
        match checked.shortest.iter().find(|(p, _)| *p == case.breaks) {
            Some((_, path)) => eprintln!("{}: counterexample {path}", case.name),
            None => missed.push(format!(
                "{} (should break {:?}; found {:?})",
                case.name, case.breaks, checked.found
            )),
        }
    }
    assert!(
        missed.is_empty(),
        "mutations the checker did not catch:\n{}",
        missed.join("\n")
    );
}

#[test]
fn every_redlock_safety_property_is_broken_by_some_mutation() {
    let broken: Vec<&str> = cases().iter().map(|c| c.breaks).collect();
    for property in SAFETY {
        assert!(
            broken.contains(property),
            "no mutation breaks {property:?}: it checks nothing"
        );
    }
}
