//! Scenarios 18 (Redis Sentinel) and c2 (Redis Cluster): the holder's belief through
//! failovers, in the topologies production runs — a master with **two** replicas (Sentinel,
//! `down-after-milliseconds` 1 s), a cluster with two replicas per master
//! (`cluster-node-timeout` 1 s).
//!
//! Each round is one `testkit::belief` round on a fresh deployment: a holder with a renewed,
//! fenced lock (ttl 6 s, `min_replicas = 1`) asks `ensure_held()` every 25 ms; a contender
//! tries to take the same lock every 10 ms; 1 s in, the fault. The rounds cycle through the
//! faults: Sentinel — `SENTINEL FAILOVER`, the master `SIGKILL`ed, the master `SIGSTOP`ped for
//! 5 s (a failover happens meanwhile; it resumes still believing it is master; the contender
//! connects during the freeze); Cluster — `CLUSTER FAILOVER` on a replica of the lock's
//! master, and that master `SIGSTOP`ped for 5 s.
//!
//! Rounds take turns over the kinds of hold (`belief::Kind`): the lock, a semaphore's permit
//! (a semaphore of 1, against the same), a read hold (against a writer) — in the CI profile
//! Sentinel's faults meet a read hold, the lock and a permit, and Cluster's the lock and a
//! permit; the heavy profile runs each fault with each kind.
//!
//! Invariants: the contender never takes the lock while the holder still believes it holds it
//! (overlap 0); a planned failover keeps the lock; with Sentinel, the holder's deadline
//! outruns the named master's copy of the key for less than 1.2 s. The note counts rounds
//! held and lost, contender wins, the worst overlap and the deadline gap.

use std::sync::Arc;
use std::time::Duration;

use distlock::{hash_slot, Config};
use testkit::belief::{self, Connect, Kind, Probe, Round, Timeline, BELIEF_LOCK};
use testkit::{RedisCluster, RedisSentinel, SentinelOptions, ServerOptions};

use crate::common::Settings;
use crate::report::{Scenario, Tally};

const TTL: Duration = Duration::from_secs(6);

/// The faults, in the order rounds cycle through them.
#[derive(Clone, Copy, Debug)]
enum Fault {
    SentinelFailover,
    SentinelKill,
    SentinelStop,
    ClusterFailover,
    ClusterStop,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::SentinelFailover => "SENTINEL FAILOVER",
            Fault::SentinelKill => "master SIGKILL",
            Fault::SentinelStop => "master SIGSTOP 5 s",
            Fault::ClusterFailover => "CLUSTER FAILOVER",
            Fault::ClusterStop => "master SIGSTOP 5 s",
        }
    }

    fn planned(self) -> bool {
        matches!(self, Fault::SentinelFailover | Fault::ClusterFailover)
    }
}

pub(crate) fn sentinel(s: &Settings, budget: Duration) -> Scenario {
    let rounds = s.pick(1, 3);
    let faults = [
        Fault::SentinelFailover,
        Fault::SentinelKill,
        Fault::SentinelStop,
    ];
    Scenario::new(
        "18",
        format!(
            "Sentinel, master + 2 replicas: holder belief vs a contender through {}x each of SENTINEL FAILOVER, SIGKILL, SIGSTOP",
            rounds
        ),
        budget,
        move |t| run(t, faults.to_vec(), rounds, 2),
    )
}

pub(crate) fn cluster(s: &Settings, budget: Duration) -> Scenario {
    let rounds = s.pick(1, 3);
    let faults = [Fault::ClusterFailover, Fault::ClusterStop];
    Scenario::new(
        "c2",
        format!(
            "Redis Cluster, 2 replicas per master: holder belief vs a contender through {}x each of CLUSTER FAILOVER, master SIGSTOP",
            rounds
        ),
        budget,
        move |t| run(t, faults.to_vec(), rounds, 0),
    )
}

/// The kinds of hold the rounds take turns over.
const KINDS: [Kind; 3] = [Kind::Lock, Kind::Permit, Kind::Read];

/// What the rounds of one fault add up to.
#[derive(Default)]
struct Counts {
    rounds: u64,
    held: u64,
    lost: u64,
    taken: u64,
    overlaps: u64,
    worst_overlap: Duration,
    worst_gap: Duration,
    longest_gap: Duration,
    /// Why each lost round was lost (distinct).
    why: Vec<String>,
    /// The kinds of hold its rounds took.
    kinds: Vec<Kind>,
}

/// `first`: the index in [`KINDS`] of the first round's kind (the rounds take turns).
async fn run(t: Arc<Tally>, faults: Vec<Fault>, rounds: usize, first: usize) {
    let mut notes = Vec::new();
    let mut turn = first;
    for fault in faults {
        let mut counts = Counts::default();
        for _ in 0..rounds {
            let kind = KINDS[turn % KINDS.len()];
            turn += 1;
            counts.kinds.push(kind);
            let timeline = match fault {
                Fault::SentinelFailover | Fault::SentinelKill | Fault::SentinelStop => {
                    sentinel_round(fault, kind).await
                }
                Fault::ClusterFailover | Fault::ClusterStop => cluster_round(fault, kind).await,
            };
            t.faults(1);
            t.ops(timeline.held.len() as u64 + timeline.taken.len() as u64);
            let overlap = timeline.worst_overlap();
            counts.rounds += 1;
            counts.held += u64::from(timeline.lost.is_none());
            counts.lost += u64::from(timeline.lost.is_some());
            if let Some((_, why)) = &timeline.lost {
                if !counts.why.contains(why) {
                    counts.why.push(why.clone());
                }
            }
            counts.taken += timeline.taken.len() as u64;
            counts.overlaps += u64::from(overlap > Duration::ZERO);
            counts.worst_overlap = counts.worst_overlap.max(overlap);
            counts.worst_gap = counts.worst_gap.max(timeline.worst_gap);
            counts.longest_gap = counts.longest_gap.max(timeline.longest_gap);
            t.check(overlap == Duration::ZERO, || {
                format!(
                    "{} ({kind:?}): a second holder ({})",
                    fault.name(),
                    timeline.summary()
                )
            });
            t.check(timeline.longest_gap < Duration::from_millis(1200), || {
                format!(
                    "{} ({kind:?}): the holder believed beyond the serving master's copy ({})",
                    fault.name(),
                    timeline.summary()
                )
            });
            if fault.planned() {
                t.check(timeline.lost.is_none(), || {
                    format!(
                        "{} ({kind:?}): the lock was not kept ({})",
                        fault.name(),
                        timeline.summary()
                    )
                });
            }
        }
        notes.push(format!(
            "{} ({:?}): {} rounds, held {}, lost {}{}, contender wins {}, overlaps {} (worst {} ms), deadline gap {} ms for {} ms",
            fault.name(),
            counts.kinds,
            counts.rounds,
            counts.held,
            counts.lost,
            if counts.why.is_empty() {
                String::new()
            } else {
                format!(" ({})", counts.why.join(" / "))
            },
            counts.taken,
            counts.overlaps,
            counts.worst_overlap.as_millis(),
            counts.worst_gap.as_millis(),
            counts.longest_gap.as_millis(),
        ));
    }
    t.note(notes.join("; "));
}

async fn sentinel_round(fault: Fault, kind: Kind) -> Timeline {
    let group = Arc::new(
        tokio::task::spawn_blocking(|| {
            RedisSentinel::start_with(SentinelOptions {
                replicas: 2,
                down_after: Duration::from_secs(1),
            })
        })
        .await
        .expect("start the Sentinel group"),
    );
    let contender_from = match fault {
        Fault::SentinelStop => Duration::from_millis(1500),
        _ => Duration::ZERO,
    };
    let round = group
        .belief_round((TTL, 1), Duration::from_secs(12), contender_from)
        .of(kind);
    let faulty = group.clone();
    let (timeline, _guard) = belief::round(round, move || match fault {
        Fault::SentinelFailover => {
            faulty.failover();
        }
        Fault::SentinelKill => {
            let old = faulty.signal_master("-KILL");
            faulty.wait_for_promotion(old);
        }
        _ => {
            let old = faulty.signal_master("-STOP");
            let thaw = std::time::Instant::now() + Duration::from_secs(5);
            faulty.wait_for_promotion(old);
            std::thread::sleep(thaw.saturating_duration_since(std::time::Instant::now()));
            faulty.server(old).signal("-CONT");
        }
    })
    .await;
    timeline
}

async fn cluster_round(fault: Fault, kind: Kind) -> Timeline {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| {
            RedisCluster::start_with(
                3,
                2,
                ServerOptions {
                    args: vec!["--cluster-node-timeout".into(), "1000".into()],
                    ..Default::default()
                },
            )
        })
        .await
        .expect("start the cluster"),
    );
    let slot = hash_slot(format!("distlock:{{{BELIEF_LOCK}}}").as_bytes());
    let master = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.master_of_slot(slot))
            .await
            .unwrap()
    };
    let urls = cluster.urls();
    let connect: Connect = Arc::new(move || {
        let urls = urls.clone();
        Box::pin(async move {
            Config::cluster(urls)
                .connect()
                .await
                .expect("connect to the cluster")
        })
    });
    // Asked of a node that is never frozen: another shard's master.
    let asked = cluster
        .master_ports()
        .into_iter()
        .find(|&p| p != master)
        .expect("another master");
    let probe: Probe = Arc::new(move || Box::pin(slot_owner(asked, slot)));
    let round = Round {
        connect,
        ttl: TTL,
        replicas: 1,
        renew: true,
        run: Duration::from_secs(12),
        contender_from: Duration::ZERO,
        probe: Some(probe),
        kind,
    };
    let faulty = cluster.clone();
    let (timeline, _guard) = belief::round(round, move || match fault {
        Fault::ClusterFailover => faulty.failover(faulty.replica_of(master)),
        _ => {
            let node = faulty.node(master);
            node.signal("-STOP");
            std::thread::sleep(Duration::from_secs(5));
            node.signal("-CONT");
        }
    })
    .await;
    timeline
}

/// The port of the master serving `slot`, as the node on `asked` sees it (`CLUSTER SLOTS`).
async fn slot_owner(asked: u16, slot: u16) -> Option<u16> {
    let ask = async {
        let client = redis::Client::open(format!("redis://127.0.0.1:{asked}/")).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await
            .ok()?;
        ranges.into_iter().find_map(|range| {
            let redis::Value::Array(fields) = range else {
                return None;
            };
            let int = |v: &redis::Value| match v {
                redis::Value::Int(n) => Some(*n),
                _ => None,
            };
            let (lo, hi) = (int(fields.first()?)?, int(fields.get(1)?)?);
            if !(lo..=hi).contains(&i64::from(slot)) {
                return None;
            }
            let redis::Value::Array(master) = fields.get(2)? else {
                return None;
            };
            int(master.get(1)?).and_then(|p| u16::try_from(p).ok())
        })
    };
    tokio::time::timeout(Duration::from_millis(500), ask)
        .await
        .ok()
        .flatten()
}
