//! C1/C2: distlock on a Redis Cluster (`Config::cluster`) and on a RedLock quorum
//! (`Config::redlock`) against the same calls on one server.
//!
//! * C1 is B1 (one task, acquire + release in a loop) on one server, on a 3-master cluster and
//!   on RedLock quorums of 3 and 5 masters;
//! * C2 is B2 (64 tasks, distinct keys, one client) on the same, plus a 1-master cluster (every
//!   slot on one node: the cluster client's own cost).
//!
//! The clusters (`testkit::RedisCluster`, no replicas) and the RedLock masters (independent
//! `testkit::RedisServer`s) are started here and stopped by PID.
//! Backends alternate within each repetition (the first one rotates); the *× one server*
//! column is the median of per-repetition ratios.

use std::fmt::Write;

use distlock::{Client, Config};
use tokio::time::Instant;

use crate::contenders::{BenchResult, TTL};
use crate::plan::Plan;
use crate::stats::{fmt_num, median, Samples};

/// Where a run's client points.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Standalone,
    OneMaster,
    ThreeMasters,
    RedLock3,
    RedLock5,
}

impl Backend {
    fn label(self) -> &'static str {
        match self {
            Backend::Standalone => "one server (`Config::new`)",
            Backend::OneMaster => "cluster, 1 master (`Config::cluster`)",
            Backend::ThreeMasters => "cluster, 3 masters (`Config::cluster`)",
            Backend::RedLock3 => "RedLock, 3 masters (`Config::redlock`)",
            Backend::RedLock5 => "RedLock, 5 masters (`Config::redlock`)",
        }
    }
}

/// One row: a backend's medians over the repetitions.
pub(crate) struct Row {
    scenario: &'static str,
    tasks: usize,
    backend: Backend,
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    /// Median of the per-repetition throughput ratios over one server.
    over_standalone: f64,
}

/// The clients of every backend (and the servers they talk to, stopped when dropped).
struct Clients {
    standalone: Client,
    one: Client,
    three: Client,
    redlock3: Client,
    redlock5: Client,
    _clusters: [testkit::RedisCluster; 2],
    _masters: Vec<testkit::RedisServer>,
}

impl Clients {
    fn get(&self, backend: Backend) -> &Client {
        match backend {
            Backend::Standalone => &self.standalone,
            Backend::OneMaster => &self.one,
            Backend::ThreeMasters => &self.three,
            Backend::RedLock3 => &self.redlock3,
            Backend::RedLock5 => &self.redlock5,
        }
    }
}

/// Runs C1 and/or C2 (as `plan` selects) and returns their rows.
pub(crate) async fn run(plan: &Plan, standalone_url: &str) -> BenchResult<Vec<Row>> {
    let (one, three, masters) = tokio::task::spawn_blocking(|| {
        (
            testkit::RedisCluster::start_single_master(),
            testkit::RedisCluster::start(3, 0),
            (0..5)
                .map(|_| testkit::RedisServer::start())
                .collect::<Vec<_>>(),
        )
    })
    .await?;
    let quorum = |n: usize| Config::redlock(masters[..n].iter().map(testkit::RedisServer::url));
    let clients = Clients {
        standalone: Config::new(standalone_url).connect().await?,
        one: Config::cluster(one.urls()).connect().await?,
        three: Config::cluster(three.urls()).connect().await?,
        redlock3: quorum(3).connect().await?,
        redlock5: quorum(5).connect().await?,
        _clusters: [one, three],
        _masters: masters,
    };
    let mut rows = Vec::new();
    if plan.runs("C1") {
        let backends = [
            Backend::Standalone,
            Backend::ThreeMasters,
            Backend::RedLock3,
            Backend::RedLock5,
        ];
        rows.extend(scenario(plan, &clients, "C1", 1, &backends).await?);
    }
    if plan.runs("C2") {
        let backends = [
            Backend::Standalone,
            Backend::OneMaster,
            Backend::ThreeMasters,
            Backend::RedLock3,
            Backend::RedLock5,
        ];
        rows.extend(scenario(plan, &clients, "C2", 64, &backends).await?);
    }
    Ok(rows)
}

async fn scenario(
    plan: &Plan,
    clients: &Clients,
    name: &'static str,
    tasks: usize,
    backends: &[Backend],
) -> BenchResult<Vec<Row>> {
    // Per backend: (throughput, p50, p99) of every repetition, in repetition order.
    let mut runs: Vec<Vec<[f64; 3]>> = vec![Vec::new(); backends.len()];
    for rep in 0..plan.reps {
        for i in 0..backends.len() {
            let at = (i + rep) % backends.len();
            let backend = backends[at];
            let tag = format!("{name}-{rep}-{at}");
            let mut latency = cycles(clients.get(backend), &tag, tasks, plan).await?;
            let per_sec = latency.len() as f64 / plan.measure.as_secs_f64();
            let row = [per_sec, latency.quantile_us(0.5), latency.quantile_us(0.99)];
            eprintln!(
                "{name} {tasks:>2} tasks rep {rep} {:<40} {:>9.0} cycles/s  p50 {:>7.1} µs",
                backend.label(),
                row[0],
                row[1]
            );
            runs[at].push(row);
        }
    }
    let col = |rows: &[[f64; 3]], i: usize| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>());
    Ok(backends
        .iter()
        .zip(&runs)
        .map(|(&backend, rows)| {
            let ratios: Vec<f64> = rows
                .iter()
                .zip(&runs[0])
                .map(|(r, s)| r[0] / s[0])
                .collect();
            Row {
                scenario: name,
                tasks,
                backend,
                per_sec: col(rows, 0),
                p50_us: col(rows, 1),
                p99_us: col(rows, 2),
                over_standalone: median(&ratios),
            }
        })
        .collect())
}

/// `tasks` tasks doing acquire + release on their own keys (`bench:<tag>:<i>`: spread over
/// the slots) for the plan's warmup and measured window; the latencies of the measured cycles.
async fn cycles(client: &Client, tag: &str, tasks: usize, plan: &Plan) -> BenchResult<Samples> {
    let start = Instant::now() + plan.warmup;
    let end = start + plan.measure;
    let mut handles = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let (client, name) = (client.clone(), format!("bench:{tag}:{i}"));
        handles.push(tokio::spawn(async move {
            let mut latency = Samples::with_capacity(1 << 12);
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let guard = client.lock(name.as_str()).ttl(TTL).acquire().await?;
                guard.release().await?;
                if t0 >= start {
                    latency.push(t0.elapsed());
                }
            }
            BenchResult::Ok(latency)
        }));
    }
    let mut latency = Samples::default();
    for handle in handles {
        latency.extend(handle.await??);
    }
    Ok(latency)
}

/// The C1/C2 section of the report.
pub(crate) fn render(rows: &[Row], out: &mut String) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## C1/C2 — Redis Cluster and RedLock against one server\n\n\
         distlock's acquire + release (B1's and B2's loop, `Client::lock(..).acquire()` then \
         `release()`) on one server, on a 1-master cluster (every slot on one node), on a \
         3-master cluster and on RedLock quorums of 3 and 5 independent masters, all on this \
         machine (no replicas). Keys are distinct per task, so they spread over the slots. \
         *× one server* is the median of per-repetition ratios.\n"
    );
    let _ = writeln!(
        out,
        "| scenario | tasks | backend | cycles/s | × one server | p50 µs | p99 µs |\n| --- | ---: | --- | ---: | ---: | ---: | ---: |"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {:.0} | {:.0} |",
            r.scenario,
            r.tasks,
            r.backend.label(),
            fmt_num(r.per_sec),
            r.over_standalone,
            r.p50_us,
            r.p99_us
        );
    }
    let _ = writeln!(
        out,
        "\nWhat sets the figures: on one server a call goes from the caller's task to the \
         connection's driver; the cluster client puts its own driver task in between (it lives \
         on the client's runtime thread, see `backend`): one more task hop and channel per call, and one thread that every call \
         of the client passes through. With 64 tasks (C2) one server also gets group commit \
         (`batch`: concurrent plain acquires and releases share one pipeline), which a cluster \
         connection does not do (it routes per key). 1 → 3 masters spreads the Redis work over \
         three processes; on this machine two cores are shared by the benchmark's client and \
         every redis-server, so the CPU limits the figure, not any one master. On separate \
         hosts each master brings its own cores and network (not measured here); the client's \
         one driver thread stays.\n\n\
         RedLock sends every acquire and every release to every master at once and goes on \
         when a majority has answered (the rest finish in the background), so on separate \
         hosts we expect a cycle to cost about the round trip of the slowest master of the \
         fastest majority, twice (not measured here). Here the masters share the two cores with the client, so each cycle \
         costs N masters' Redis work and N requests' client work: the figure falls with N. \
         RedLock connections get no group commit (`batch` is for one server).\n"
    );
}
