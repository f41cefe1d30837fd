//! Scenario 21: server clock steps and restarts. Redis keeps a key's expiry as a wall-clock
//! date, so a server whose clock steps forward expires its locks early, and a server restarted
//! without persistence comes back without them: the next holder takes the lock at once, and the
//! old holder must be told soon (the client's server check confirms every lease when a server's
//! clock ran ahead or its run id changed; `Config::server_check`). Each round is a
//! `testkit::step_round` (a fresh deployment on a stepped clock: an `LD_PRELOAD` shim on real
//! `redis-server` processes) or a `testkit::belief::restart_round` (`SIGKILL`, then started
//! again on its port): a holder asking `ensure_held()` every 25 ms, a contender trying every
//! 10 ms, the fault 1 s in.
//!
//! Invariants: after a step forward that expired the lock, the holder is told, and believes for
//! at most 700 ms after the contender took it (the 250 ms check, a confirming round trip, the
//! holder's 25 ms between checks, room for load; 1.2 s after a restart, whose reconnection
//! backs off up to 500 ms); a step back, or a step on a minority of a RedLock quorum's masters,
//! keeps the lock and tells nobody it was lost.

use std::sync::Arc;
use std::time::Duration;

use testkit::belief::{restart_round, Kind};
use testkit::{step_round, Stepped};

use crate::common::Settings;
use crate::report::{Scenario, Tally};

const TOLD_WITHIN: Duration = Duration::from_millis(700);
const TOLD_AFTER_RESTART_WITHIN: Duration = Duration::from_millis(1200);

/// What happens to the deployment 1 s in.
enum Fault {
    /// Its servers' wall clock steps (forward?, by).
    Step(Stepped, (bool, Duration)),
    /// One server is killed and started again (no persistence).
    Restart,
}

/// One case: where, the lease (ttl, renewed), the step (forward?, by), and whether the lock
/// must be kept.
struct Case {
    name: &'static str,
    fault: Fault,
    lease: (Duration, bool),
    kept: bool,
}

fn cases() -> Vec<Case> {
    let secs = Duration::from_secs;
    vec![
        Case {
            name: "one server, renewed, +60 s",
            fault: Fault::Step(Stepped::Server, (true, secs(60))),
            lease: (secs(6), true),
            kept: false,
        },
        Case {
            name: "one server, not renewed, +60 s",
            fault: Fault::Step(Stepped::Server, (true, secs(60))),
            lease: (secs(8), false),
            kept: false,
        },
        Case {
            name: "one server, -60 s",
            fault: Fault::Step(Stepped::Server, (false, secs(60))),
            lease: (secs(3), true),
            kept: true,
        },
        Case {
            name: "cluster (3 masters), +9 s",
            fault: Fault::Step(Stepped::Cluster, (true, secs(9))),
            lease: (secs(6), true),
            kept: false,
        },
        Case {
            name: "RedLock, 2 of 3 masters +60 s",
            fault: Fault::Step(Stepped::Quorum { stepped: 2 }, (true, secs(60))),
            lease: (secs(6), true),
            kept: false,
        },
        Case {
            name: "RedLock, 1 of 3 masters +60 s",
            fault: Fault::Step(Stepped::Quorum { stepped: 1 }, (true, secs(60))),
            lease: (secs(6), true),
            kept: true,
        },
        Case {
            name: "one server restarted, renewed",
            fault: Fault::Restart,
            lease: (secs(6), true),
            kept: false,
        },
        Case {
            name: "one server restarted, not renewed",
            fault: Fault::Restart,
            lease: (secs(8), false),
            kept: false,
        },
    ]
}

pub(crate) fn scenario(_s: &Settings, budget: Duration) -> Scenario {
    Scenario::new(
        "21",
        "server clock steps (one server renewed, not renewed, back; cluster; RedLock majority, minority) and restarts; holder belief vs a contender",
        budget,
        run,
    )
}

async fn run(t: Arc<Tally>) {
    let mut notes = Vec::new();
    for case in cases() {
        let (ttl, renew) = case.lease;
        let run = Duration::from_secs(4);
        let (timeline, within) = match case.fault {
            Fault::Step(on, step) => (step_round(on, (ttl, renew, run), step).await, TOLD_WITHIN),
            Fault::Restart => (
                restart_round(Kind::Lock, ttl, renew, run).await,
                TOLD_AFTER_RESTART_WITHIN,
            ),
        };
        let overlap = timeline.worst_overlap();
        t.faults(1);
        t.ops(timeline.held.len() as u64 + timeline.taken.len() as u64);
        if case.kept {
            t.check(timeline.taken.is_empty() && timeline.lost.is_none(), || {
                format!(
                    "{}: the lock was not kept ({})",
                    case.name,
                    timeline.summary()
                )
            });
        } else {
            t.check(!timeline.taken.is_empty(), || {
                format!(
                    "{}: the step did not expire the lock ({})",
                    case.name,
                    timeline.summary()
                )
            });
            t.check(timeline.lost.is_some() && overlap <= within, || {
                format!(
                    "{}: the holder was not told in time ({})",
                    case.name,
                    timeline.summary()
                )
            });
        }
        notes.push(format!(
            "{}: {}, contender wins {}, overlap {} ms",
            case.name,
            if timeline.lost.is_some() {
                "told"
            } else {
                "kept"
            },
            timeline.taken.len(),
            overlap.as_millis(),
        ));
    }
    t.note(notes.join("; "));
}
