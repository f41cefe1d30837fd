//! `cargo bench --bench locks`: distlock against a raw-redis floor and its crates.io peers.
//!
//! Starts its own `redis-server` (testkit), then runs every scenario for every implementation
//! in the same process, alternating the implementations within each repetition (the starting
//! one rotates), and reports medians over the repetitions:
//!
//! * B1 uncontended acquire + release, one task;
//! * B2 the same from 64 and 256 tasks on distinct keys over one client;
//! * B3 8 and 32 tasks waiting for one key: handoff gap and fairness;
//! * B4 10,000 held locks renewed by the watchdog: Redis work and the smallest remaining ttl;
//! * B5 the marketplace of "Redis in Action" ch. 6 (WATCH vs coarse lock vs per-item locks);
//! * S1 B1 for a semaphore's permit and a read hold, S2 B3 for permits (8 tasks, 2 permits),
//!   against their raw floor and a hand-written Redisson-style semaphore;
//! * S3 B3 per kind of hold (8 tasks: the lock, fenced, a permit of one, a set of two), every
//!   waiter in its turn, distlock only;
//! * C1/C2 B1/B2's distlock loop on a Redis Cluster (1 and 3 masters) and a RedLock quorum (3 and
//!   5 masters) against one server.
//!
//! Prints the tables, checks the targets (PASS/FAIL) and writes `BENCHMARKS.md` with its
//! plots (`docs/benchmarks/*.svg`).
//!
//! Environment: `BENCH_QUICK=1` for a short run (under a minute); `BENCH_REPS`, `BENCH_SECS`
//! (measured seconds per run), `BENCH_ONLY=B1,B3` to pick scenarios (`S1`, `S2`: permits and read holds; `S3`: every kind in its turn; `C1`, `C2`: the cluster and RedLock rows), `BENCH_WORKERS` (tokio
//! worker threads, default: the number of CPUs), `BENCH_NO_WRITE=1` to leave BENCHMARKS.md and
//! the plots alone, `BENCH_DELAY_US=250` to reach Redis through a delay line (each direction
//! delayed this long, as between hosts: `testkit::delay`).

mod contenders;
mod deployments;
mod holds;
mod market;
mod plan;
mod plots;
mod probe;
mod report;
mod scenarios;
mod semaphores;
mod stats;
mod turns;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use contenders::{BenchResult, Contenders, Hold, Kind};
use market::Variant;
use plan::{env_f64, env_flag, Plan};
use probe::Probe;
use report::{B3Row, B5Row, Report};
use scenarios::{Renewer, Runner};
use stats::{median, CycleRow, Samples};

fn main() {
    let plan = Plan::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.workers)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(error) = runtime.block_on(run(plan)) {
        eprintln!("benchmark failed: {error}");
        std::process::exit(1);
    }
}

/// The contenders in the order used for repetition `rep` (rotated so none always goes first).
fn rotated<T: Copy>(items: &[T], rep: usize) -> Vec<T> {
    let mut v = items.to_vec();
    if !v.is_empty() {
        let n = rep % v.len();
        v.rotate_left(n);
    }
    v
}

/// Runs `run(rep, key)` for every repetition over the keys in `order(rep)`, and gathers the
/// results per key in repetition order: the ratios of the report pair results by position.
async fn repeat<K: Copy + Eq + Hash, R>(
    reps: usize,
    order: impl Fn(usize) -> Vec<K>,
    mut run: impl AsyncFnMut(usize, K) -> BenchResult<R>,
) -> BenchResult<HashMap<K, Vec<R>>> {
    let mut results: HashMap<K, Vec<R>> = HashMap::new();
    for rep in 0..reps {
        for key in order(rep) {
            let result = run(rep, key).await?;
            results.entry(key).or_default().push(result);
        }
    }
    Ok(results)
}

async fn run(plan: Plan) -> BenchResult<()> {
    let server = testkit::RedisServer::start();
    // `BENCH_DELAY_US`: every contender reaches Redis through a delay line (each direction
    // delayed this long, as between hosts); the server's own counters are read directly.
    let delay = plan
        .delay
        .map(|delay| testkit::delay::DelayProxy::to(&server, delay));
    let url = delay
        .as_ref()
        .map_or_else(|| server.url(), |line| line.url());
    let mut admin = server.conn().await;
    let probe = Probe::new(server.conn().await);
    let contenders = Arc::new(Contenders::connect(&url).await?);
    if let Ok(which) = std::env::var("BENCH_PROFILE") {
        return profile(contenders, &which).await;
    }
    let mut report = Report::new(&plan, &mut admin).await?;
    report.macro_ran = contenders.kinds().contains(&Kind::Macro);
    eprintln!(
        "distlock benchmark ({} mode): {} reps × {:?} per run, {} workers, redis on {url}",
        if plan.quick { "quick" } else { "full" },
        plan.reps,
        plan.measure,
        plan.workers
    );

    // The round trip unit: PING p50 in B1's loop (a rough sequential measure if B1 is skipped),
    // through the delay line if there is one.
    let mut pinged = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    report.rtt_us = scenarios::ping_rtt_us(&mut pinged, 2000).await?;
    report.delay = plan.delay;

    let mut bench = Bench {
        plan: &plan,
        url: &url,
        admin,
        kinds: contenders.kinds().to_vec(),
        runner: Runner::new(probe, contenders, plan.warmup, plan.measure),
    };
    if plan.runs("B1") {
        bench.b1(&mut report).await?;
    }
    if plan.runs("B2") {
        bench.b2(&mut report).await?;
    }
    if plan.runs("B3") {
        bench.b3(&mut report).await?;
    }
    if plan.runs("B4") {
        bench.b4(&mut report).await?;
    }
    if plan.runs("B5") {
        bench.b5(&mut report).await?;
    }
    if plan.runs("S1") || plan.runs("S2") {
        report.holds = holds::run(&plan, &mut bench.runner, &mut bench.admin).await?;
    }
    report.turns = turns::run(&plan, &mut bench.runner, &mut bench.admin).await?;
    if plan.runs("C1") || plan.runs("C2") {
        report.deployments = deployments::run(&plan, &url).await?;
    }

    let text = report.render();
    println!("{text}");
    if !env_flag("BENCH_NO_WRITE") {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md");
        // What other tools measured (below the marker) stays as it was.
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let text = testkit::with_kept_part(&text, &old, report::KEPT_MARKER);
        std::fs::write(path, &text)?;
        eprintln!("wrote {path}");
        for plot in plots::write(&report, std::path::Path::new(env!("CARGO_MANIFEST_DIR")))? {
            eprintln!("wrote {}", plot.display());
        }
    }
    // The clients shut down while their server still runs.
    drop(bench);
    drop(delay);
    drop(server);
    Ok(())
}

/// What every scenario runs against.
struct Bench<'a> {
    plan: &'a Plan,
    url: &'a str,
    admin: redis::aio::MultiplexedConnection,
    /// The contenders that run (the macro only once it expands).
    kinds: Vec<Kind>,
    runner: Runner,
}

impl Bench<'_> {
    /// B1/B2: every contender in `kinds`, rotated, `plan.reps` times; `progress` logs a run.
    async fn cycle_runs(
        &mut self,
        kinds: &[Kind],
        scenario: &str,
        tasks: usize,
        progress: impl Fn(usize, Kind, &CycleRow),
    ) -> BenchResult<HashMap<Kind, Vec<CycleRow>>> {
        flush(&mut self.admin).await?;
        let runner = &mut self.runner;
        repeat(
            self.plan.reps,
            |rep| rotated(kinds, rep),
            async |rep, kind| {
                let row = runner
                    .cycles(kind, scenario, tasks, Hold::Lock)
                    .await?
                    .row();
                progress(rep, kind, &row);
                Ok(row)
            },
        )
        .await
    }

    async fn b1(&mut self, report: &mut Report) -> BenchResult<()> {
        let mut kinds = vec![Kind::Ping];
        kinds.extend(&self.kinds);
        let runs = self
            .cycle_runs(&kinds, "b1", 1, |rep, kind, row| {
                eprintln!(
                    "B1 rep {rep} {:<30} {:>9.0} cycles/s  p50 {:>6.1} µs",
                    kind.label(),
                    row[0],
                    row[1]
                );
            })
            .await?;
        report.b1 = medians(&kinds, &runs);
        report.rtt_us = report.b1[0].1[1];
        report.per_rep.insert("B1".into(), throughputs(&runs));
        Ok(())
    }

    async fn b2(&mut self, report: &mut Report) -> BenchResult<()> {
        let kinds = self.kinds.clone();
        for tasks in [64, 256] {
            let runs = self
                .cycle_runs(&kinds, &format!("b2-{tasks}"), tasks, |rep, kind, row| {
                    eprintln!(
                        "B2 {tasks:>3} tasks rep {rep} {:<30} {:>9.0} cycles/s",
                        kind.label(),
                        row[0]
                    );
                })
                .await?;
            report
                .per_rep
                .insert(format!("B2 {tasks}"), throughputs(&runs));
            report.b2.push((tasks, medians(&kinds, &runs)));
        }
        Ok(())
    }

    async fn b3(&mut self, report: &mut Report) -> BenchResult<()> {
        let Bench {
            plan,
            admin,
            kinds,
            runner,
            ..
        } = self;
        for tasks in [8, 32] {
            flush(admin).await?;
            // Overlaps are failures to count, not a spread to take the median of.
            let mut violations: HashMap<Kind, u64> = HashMap::new();
            let mut gaps: HashMap<Kind, Samples> = HashMap::new();
            let mut waits: HashMap<Kind, Vec<Samples>> = HashMap::new();
            let runs = repeat(
                plan.reps,
                |rep| rotated(kinds, rep),
                async |rep, kind| {
                    let mut r = runner
                        .handoffs(kind, &format!("b3-{tasks}-{rep}"), tasks, Hold::Lock)
                        .await?;
                    let row = r.row();
                    eprintln!(
                    "B3 {tasks:>2} tasks rep {rep} {:<30} {:>8.0} sections/s  gap p50 {:>7.1} µs",
                    kind.label(),
                    row[0],
                    row[1]
                );
                    *violations.entry(kind).or_default() += r.violations;
                    gaps.entry(kind)
                        .or_default()
                        .extend(std::mem::take(&mut r.gaps));
                    let by_position = waits.entry(kind).or_default();
                    for (at, samples) in std::mem::take(&mut r.waits).into_iter().enumerate() {
                        match by_position.get_mut(at) {
                            Some(all) => all.extend(samples),
                            None => by_position.push(samples),
                        }
                    }
                    Ok(row)
                },
            )
            .await?;
            report
                .per_rep
                .insert(format!("B3 {tasks}"), throughputs(&runs));
            for (kind, m) in medians(kinds, &runs) {
                report
                    .b3
                    .push(B3Row::new(tasks, kind, m, violations[&kind]));
            }
            report.b3_gaps.push((tasks, gaps));
            report.b3_waits.push((tasks, waits));
        }
        Ok(())
    }

    async fn b4(&mut self, report: &mut Report) -> BenchResult<()> {
        let renewers = [
            Renewer::Distlock { batch: 256 },
            Renewer::Distlock { batch: 64 },
            Renewer::AsyncRedisLock,
        ];
        for renewer in renewers {
            flush(&mut self.admin).await?;
            let r = scenarios::renewal(
                self.url,
                renewer,
                self.plan.renew_held,
                self.plan.renew_ttl,
                self.plan.renew_measure,
            )
            .await?;
            eprintln!(
                "B4 {:<40} {:>8.1} round trips/s  {:>8.1} commands/s  min PTTL {} ms  lost {}",
                renewer.label(),
                r.round_trips_per_sec,
                r.commands_per_sec,
                r.min_pttl_ms,
                r.lost
            );
            report.b4.push((renewer, r));
        }
        Ok(())
    }

    async fn b5(&mut self, report: &mut Report) -> BenchResult<()> {
        let (plan, url) = (self.plan, self.url);
        let shapes = [(1, 1), (5, 1), (5, 5)];
        // Every shape in each repetition; the variants rotate within a shape.
        let order = |rep| {
            shapes
                .iter()
                .flat_map(|&(s, b)| {
                    rotated(&Variant::ALL, rep)
                        .into_iter()
                        .map(move |v| (s, b, v))
                })
                .collect()
        };
        let runs = repeat(plan.market_reps, order, async |rep, (sellers, buyers, variant)| {
            let r = market::run(url, variant, sellers, buyers, plan.market_secs).await?;
            eprintln!(
                "B5 {sellers}/{buyers} rep {rep} {:<30} listed {:>7} bought {:>7} retries {:>7} avg {:.2} ms p99 {:.2} ms",
                variant.label(),
                r.listed,
                r.bought,
                r.retries,
                r.avg_buy_ms,
                r.p99_buy_ms
            );
            Ok(r)
        })
        .await?;
        for (sellers, buyers) in shapes {
            for variant in Variant::ALL {
                let rs = &runs[&(sellers, buyers, variant)];
                report
                    .b5
                    .push(B5Row::median_of(sellers, buyers, variant, rs));
            }
        }
        Ok(())
    }
}

/// `BENCH_PROFILE=<floor|manual|macro|rslock|arl>`: only B1 cycles of one contender
/// (`BENCH_PROFILE_CYCLES` per task, default 20,000), for `valgrind --tool=callgrind` or `perf`;
/// `BENCH_PROFILE_TASKS=64`: that many tasks at once, each on its own key (B2's shape, for
/// `perf sched`: where a cycle waits).
async fn profile(contenders: Arc<Contenders>, which: &str) -> BenchResult<()> {
    let kind = *[Kind::Ping]
        .iter()
        .chain(&Kind::ALL)
        .find(|k| k.tag() == which)
        .ok_or_else(|| format!("BENCH_PROFILE={which}: no such contender"))?;
    let cycles = env_f64("BENCH_PROFILE_CYCLES").map_or(20_000, |n| n as usize);
    let tasks = env_f64("BENCH_PROFILE_TASKS").map_or(1, |n| (n as usize).max(1));
    let t0 = std::time::Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let contenders = contenders.clone();
        handles.push(tokio::spawn(async move {
            let target = contenders::Target::new("profile", kind, task, task);
            for _ in 0..cycles {
                contenders
                    .cycle(kind, &target)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        }));
    }
    for handle in handles {
        handle.await.map_err(|e| e.to_string())??;
    }
    let elapsed = t0.elapsed();
    // The window of the measured cycles, for a scheduler trace on `CLOCK_MONOTONIC`
    // (`scripts/offcpu.sh`): an `Instant` shows its clock's reading.
    eprintln!("profile window: {t0:?} .. {:?}", std::time::Instant::now());
    // `run`'s last release may still be in flight: answered before the server goes with this
    // function (else the runtime's shutdown waits for it, the settle bound, in vain).
    distlock::shutdown().await;
    let total = (cycles * tasks) as f64;
    eprintln!(
        "profile {}: {tasks} task(s) × {cycles} cycles in {elapsed:?} ({:.0} cycles/s)",
        kind.label(),
        total / elapsed.as_secs_f64()
    );
    Ok(())
}

/// The first column (throughput) of every repetition's row.
fn throughputs<const N: usize>(runs: &HashMap<Kind, Vec<[f64; N]>>) -> HashMap<Kind, Vec<f64>> {
    runs.iter()
        .map(|(k, rows)| (*k, rows.iter().map(|r| r[0]).collect()))
        .collect()
}

/// Each contender's column-wise medians, in the order of `kinds`.
fn medians<const N: usize>(
    kinds: &[Kind],
    runs: &HashMap<Kind, Vec<[f64; N]>>,
) -> Vec<(Kind, [f64; N])> {
    kinds.iter().map(|k| (*k, median_cols(&runs[k]))).collect()
}

/// Column-wise medians of per-repetition rows.
fn median_cols<const N: usize>(rows: &[[f64; N]]) -> [f64; N] {
    std::array::from_fn(|i| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>()))
}

async fn flush(conn: &mut redis::aio::MultiplexedConnection) -> BenchResult<()> {
    redis::cmd("FLUSHALL").exec_async(conn).await?;
    Ok(())
}
