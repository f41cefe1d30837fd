//! The seeded bugs of `tests/mutations.rs`: each mutation (of the scripts' model, of the
//! client's, or a setting past what the docs claim), the configuration it is checked in and
//! the property it must break.

use distlock_model::protocol::{ClientBugs, Hold, Setup};
use distlock_model::scripts::Mutations;

/// One mutation: its name, the model it is checked in, the property it must break.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) setup: Setup,
    pub(crate) breaks: &'static str,
}

impl Case {
    /// The same configuration without the bug (same depth, same horizon): the scripts and
    /// the client as they are; a bug that is a setting (a drift past the bound, no margin)
    /// at the setting the docs claim (the bound, the margin).
    pub(crate) fn clean(&self) -> Setup {
        let mut clean = Setup {
            mutations: Mutations::default(),
            bugs: ClientBugs::default(),
            ..self.setup.clone()
        };
        if clean.drift > DRIFT_BOUND {
            clean.drift = DRIFT_BOUND;
        }
        if clean.margin == 0 {
            clean.margin = Setup::default().margin;
        }
        clean
    }
}

/// The drift bound the model's margin allows (25%: see `tests/model_check.rs`).
const DRIFT_BOUND: i64 = 25;

fn with_mutation(base: Setup, m: Mutations) -> Setup {
    Setup {
        mutations: m,
        ..base
    }
}

fn with_bug(base: Setup, b: ClientBugs) -> Setup {
    Setup { bugs: b, ..base }
}

/// A lock of a finer grain (ms ticks, a 6 ms lease with a 4 ms grant window), where a bug that
/// costs a lease less than a window shows.
fn fine() -> Setup {
    Setup {
        rounds: 2,
        ttl: 6,
        window: 4,
        hold: 2,
        wait: 10,
        horizon: 14,
        ..Setup::default()
    }
}

/// A crashed client's waiters and a live one (issue 48): clients 0 and 1 are one process, which
/// crashes once; client 2 lives; entries lapse 4 ms after their last look (past the 3 ms
/// recheck, as 3 s is past 1 s).
pub(crate) fn crashed() -> Setup {
    Setup {
        clients: 3,
        siblings: 2,
        crashes: 1,
        pauses: 0,
        lapse: 4,
        horizon: 10,
        ..Setup::default()
    }
}

/// The same with a fourth client (a live holder, client 2; the live waiter is client 3), where
/// the crashed client has two entries ahead of the live waiter when a release lets the lock go
/// (4 million states: `DISTLOCK_MODEL_DEEP` only; CI replays its counterexample).
pub(crate) fn crashed_behind_a_holder() -> Setup {
    Setup {
        clients: 4,
        siblings: 2,
        crashes: 1,
        pauses: 0,
        horizon: 10,
        ..Setup::default()
    }
}

pub(crate) fn cases() -> Vec<Case> {
    let m = Mutations::default;
    let b = ClientBugs::default;
    let three = Setup {
        clients: 3,
        horizon: 10,
        ..Setup::default()
    };
    let two_rounds = Setup {
        rounds: 2,
        ..Setup::default()
    };
    let fenced = Setup {
        fenced: true,
        ..Setup::default()
    };
    let stepped_back = Setup {
        fenced: true,
        clock_step: -3,
        pauses: 0,
        ..Setup::default()
    };
    let failover = Setup {
        replica: true,
        min_replicas: true,
        pauses: 0,
        ..Setup::default()
    };
    let mut cases = vec![
        Case {
            name: "an entry without its lapse (a grant never skips a waiter gone 3 s)",
            setup: with_mutation(
                crashed(),
                Mutations {
                    entry_without_lapse: true,
                    ..m()
                },
            ),
            breaks: "a live waiter is not kept waiting by dead waiters",
        },
        Case {
            name: "the scripts before issue 48 (entries without lapses, no sweep)",
            setup: with_mutation(
                crashed(),
                Mutations {
                    entry_without_lapse: true,
                    no_sweep: true,
                    ..m()
                },
            ),
            breaks: "a live waiter is not kept waiting by dead waiters",
        },
        Case {
            name: "ACQUIRE_HANDED queues a waiter without marking the lock",
            setup: with_mutation(
                Setup::default(),
                Mutations {
                    handed_writes_no_mark: true,
                    ..m()
                },
            ),
            breaks: "no waiter stranded",
        },
        Case {
            name: "ACQUIRE_READ queues a reader without marking the writer's lock",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::ReadWrite { readers: 1 },
                    ..Setup::default()
                },
                Mutations {
                    reader_writes_no_mark: true,
                    ..m()
                },
            ),
            breaks: "no waiter stranded",
        },
        Case {
            name: "ACQUIRE_ALL waits at a held lock without marking it",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::Sets,
                    ..Setup::default()
                },
                Mutations {
                    set_writes_no_mark: true,
                    ..m()
                },
            ),
            breaks: "no waiter stranded",
        },
        Case {
            name: "turn_over sets the lock it hands over unmarked",
            setup: with_mutation(
                Setup {
                    pauses: 0,
                    ..three.clone()
                },
                Mutations {
                    grant_writes_no_mark: true,
                    ..m()
                },
            ),
            breaks: "no waiter stranded",
        },
        Case {
            name: "ACQUIRE_HANDED skips its queue check",
            setup: with_mutation(
                three.clone(),
                Mutations {
                    skip_queue_check: true,
                    ..m()
                },
            ),
            breaks: "fifo",
        },
        Case {
            name: "ACQUIRE_PERMIT in a waiter's turn skips its queue check",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::Permits(1),
                    ..three.clone()
                },
                Mutations {
                    permit_skips_queue: true,
                    ..m()
                },
            ),
            breaks: "fifo",
        },
        Case {
            name: "a reader enters past a writer queued before it",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::ReadWrite { readers: 2 },
                    pauses: 0,
                    ..three.clone()
                },
                Mutations {
                    reader_passes_writer: true,
                    ..m()
                },
            ),
            breaks: "fifo",
        },
        Case {
            name: "ACQUIRE_HANDED skips its queue check (two writers and a reader)",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::ReadWrite { readers: 1 },
                    ..three.clone()
                },
                Mutations {
                    skip_queue_check: true,
                    ..m()
                },
            ),
            breaks: "fifo",
        },
        Case {
            name: "RENEW without the owner check",
            setup: with_mutation(
                Setup {
                    ttl: 5,
                    renew: 3,
                    hold: 6,
                    wait: 10,
                    horizon: 14,
                    ..Setup::default()
                },
                Mutations {
                    renew_without_owner_check: true,
                    ..m()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "RELEASE without the owner check",
            setup: with_mutation(
                two_rounds.clone(),
                Mutations {
                    release_without_owner_check: true,
                    ..m()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "a release hands the lock over for 1 ms, not the waiter's window",
            setup: with_mutation(
                fine(),
                Mutations {
                    grant_for_ttl: 1,
                    ..m()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "a lock let go with waiters queued is deleted, not handed over",
            setup: with_mutation(
                Setup::default(),
                Mutations {
                    let_go_without_handoff: true,
                    ..m()
                },
            ),
            breaks: "no waiter stranded",
        },
        Case {
            name: "a release deletes its own lock unread even when its waiters marked it",
            setup: with_mutation(
                Setup::default(),
                Mutations {
                    release_ignores_marks: true,
                    ..m()
                },
            ),
            breaks: "no waiter stranded",
        },
        Case {
            name: "the token is the server's clock, not raised above the floor",
            setup: with_mutation(
                stepped_back.clone(),
                Mutations {
                    token_from_clock_only: true,
                    ..m()
                },
            ),
            breaks: "tokens rise",
        },
        Case {
            name: "the term is the token, not raised above the record's (and the token the clock)",
            setup: with_mutation(
                Setup {
                    leader: true,
                    ..stepped_back.clone()
                },
                Mutations {
                    term_from_token_only: true,
                    token_from_clock_only: true,
                    ..m()
                },
            ),
            breaks: "terms rise",
        },
        Case {
            name: "FENCED_WRITE does not compare with the watermark",
            setup: with_mutation(
                fenced.clone(),
                Mutations {
                    write_without_watermark: true,
                    ..m()
                },
            ),
            breaks: "no stale write lands",
        },
        Case {
            name: "ACQUIRE_PERMIT counts one permit too many",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::Permits(2),
                    clients: 3,
                    horizon: 8,
                    pauses: 0,
                    ..Setup::default()
                },
                Mutations {
                    permit_off_by_one: true,
                    ..m()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "a writer is handed the lock with readers inside",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::ReadWrite { readers: 2 },
                    clients: 3,
                    horizon: 10,
                    pauses: 0,
                    ..Setup::default()
                },
                Mutations {
                    writer_ignores_readers: true,
                    ..m()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "ACQUIRE_ALL looks at its first lock only",
            setup: with_mutation(
                Setup {
                    hold_kind: Hold::Sets,
                    clients: 3,
                    horizon: 9,
                    pauses: 0,
                    ..Setup::default()
                },
                Mutations {
                    set_checks_first_only: true,
                    ..m()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "belief ends after the release, not before it is sent",
            setup: with_bug(
                Setup::default(),
                ClientBugs {
                    belief_after_release: true,
                    ..b()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "the lease counts from the reply, not from the send",
            setup: with_bug(
                Setup::default(),
                ClientBugs {
                    lease_from_reply: true,
                    ..b()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "a grant is trusted from its receipt",
            setup: with_bug(
                two_rounds.clone(),
                ClientBugs {
                    trust_grant_from_receipt: true,
                    ..b()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "a grant is trusted whichever request it names",
            setup: with_bug(
                fine(),
                ClientBugs {
                    trust_any_grant: true,
                    ..b()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "a waiter waits for messages only",
            setup: with_bug(
                Setup::default(),
                ClientBugs {
                    no_recheck: true,
                    ..b()
                },
            ),
            breaks: "no waiter stranded",
        },
        Case {
            name: "a lease clock drifting twice the bound (50% slow)",
            setup: Setup {
                drift: 50,
                ..Setup::default()
            },
            breaks: "mutual exclusion",
        },
        Case {
            name: "no margin for a lease clock drifting within the bound",
            setup: Setup {
                drift: 25,
                margin: 0,
                ..Setup::default()
            },
            breaks: "mutual exclusion",
        },
        Case {
            name: "a re-entered lock released at the inner hold's exit",
            setup: with_bug(
                Setup {
                    reentry: true,
                    ..Setup::default()
                },
                ClientBugs {
                    release_at_first_exit: true,
                    ..b()
                },
            ),
            breaks: "mutual exclusion",
        },
        Case {
            name: "min_replicas believed before the replica acknowledged",
            setup: with_bug(
                failover,
                ClientBugs {
                    believe_before_replicas: true,
                    ..b()
                },
            ),
            breaks: "mutual exclusion",
        },
    ];
    if std::env::var_os("DISTLOCK_MODEL_DEEP").is_some() {
        cases.push(Case {
            name: "no sweep (a crashed client's entries granted one after another)",
            setup: with_mutation(
                crashed_behind_a_holder(),
                Mutations {
                    no_sweep: true,
                    ..m()
                },
            ),
            breaks: "a live waiter is not kept waiting by dead waiters",
        });
    }
    cases
}
