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
//! * B5 the marketplace of "Redis in Action" ch. 6 (WATCH vs coarse lock vs per-item locks).
//!
//! Prints the tables, checks the targets (PASS/FAIL) and writes `BENCHMARKS.md`.
//!
//! Environment: `BENCH_QUICK=1` for a short run (under a minute); `BENCH_REPS`, `BENCH_SECS`
//! (measured seconds per run), `BENCH_ONLY=B1,B3` to pick scenarios, `BENCH_WORKERS` (tokio
//! worker threads, default: the number of CPUs), `BENCH_NO_WRITE=1` to leave BENCHMARKS.md alone.

mod contenders;
mod market;
mod report;
mod scenarios;
mod stats;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use contenders::{BenchResult, Contenders, Kind};
use report::{B3Row, B5Row, Report};
use scenarios::Renewer;
use stats::median;

/// Durations and sizes of one run of the harness.
pub(crate) struct Plan {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    pub(crate) warmup: Duration,
    pub(crate) measure: Duration,
    pub(crate) renew_held: usize,
    pub(crate) renew_ttl: Duration,
    pub(crate) renew_measure: Duration,
    pub(crate) market_secs: Duration,
    pub(crate) market_reps: usize,
    pub(crate) workers: usize,
    only: Option<Vec<String>>,
}

impl Plan {
    fn from_env() -> Plan {
        let quick = env_flag("BENCH_QUICK");
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let measure = env_f64("BENCH_SECS").map_or(
            Duration::from_millis(if quick { 250 } else { 600 }),
            Duration::from_secs_f64,
        );
        Plan {
            quick,
            // Many short alternating runs rather than a few long ones: on a shared machine the
            // background load shifts within seconds, and short slices spread it evenly.
            reps: env_f64("BENCH_REPS").map_or(if quick { 3 } else { 15 }, |r| r as usize),
            warmup: Duration::from_millis(100),
            measure,
            renew_held: 10_000,
            renew_ttl: Duration::from_secs(3),
            renew_measure: Duration::from_secs(if quick { 3 } else { 15 }),
            market_secs: Duration::from_secs(if quick { 1 } else { 3 }),
            market_reps: if quick { 1 } else { 3 },
            workers: env_f64("BENCH_WORKERS").map_or(cpus, |w| w as usize),
            only: std::env::var("BENCH_ONLY")
                .ok()
                .map(|s| s.split(',').map(|p| p.trim().to_uppercase()).collect()),
        }
    }

    fn runs(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn env_f64(name: &str) -> Option<f64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

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

async fn run(plan: Plan) -> BenchResult<()> {
    let server = testkit::RedisServer::start();
    let url = server.url();
    let mut admin = server.conn().await;
    let mut probe = scenarios::Probe::new(server.conn().await);
    let contenders = Arc::new(Contenders::connect(&url).await?);
    let kinds = contenders.kinds().to_vec();
    if let Ok(which) = std::env::var("BENCH_PROFILE") {
        return profile(&contenders, &which).await;
    }
    let mut report = Report::new(&plan, &mut admin).await?;
    report.macro_ran = kinds.contains(&Kind::Macro);
    eprintln!(
        "distlock benchmark ({} mode): {} reps × {:?} per run, {} workers, redis on {url}",
        if plan.quick { "quick" } else { "full" },
        plan.reps,
        plan.measure,
        plan.workers
    );

    // The round trip unit: PING p50 in B1's loop (a rough sequential measure if B1 is skipped).
    report.rtt_us = scenarios::ping_rtt_us(&mut admin, 2000).await?;

    if plan.runs("B1") {
        flush(&mut admin).await?;
        let mut b1_kinds = vec![Kind::Ping];
        b1_kinds.extend(&kinds);
        let mut runs: HashMap<Kind, Vec<[f64; 6]>> = HashMap::new();
        for rep in 0..plan.reps {
            for kind in rotated(&b1_kinds, rep) {
                let mut r = scenarios::cycles(
                    &mut probe,
                    &contenders,
                    kind,
                    "b1",
                    1,
                    plan.warmup,
                    plan.measure,
                )
                .await?;
                let row = [
                    r.per_sec,
                    r.latency.quantile_us(0.5),
                    r.latency.quantile_us(0.99),
                    r.work.cpu_us,
                    r.work.calls,
                    r.work.client_cpu_us,
                ];
                eprintln!(
                    "B1 rep {rep} {:<30} {:>9.0} cycles/s  p50 {:>6.1} µs",
                    kind.label(),
                    row[0],
                    row[1]
                );
                runs.entry(kind).or_default().push(row);
            }
        }
        report.b1 = b1_kinds
            .iter()
            .map(|k| (*k, median_cols(&runs[k])))
            .collect();
        report.rtt_us = report.b1[0].1[1];
        report.per_rep.insert("B1".into(), throughputs(&runs));
    }

    if plan.runs("B2") {
        for tasks in [64, 256] {
            flush(&mut admin).await?;
            let mut runs: HashMap<Kind, Vec<[f64; 6]>> = HashMap::new();
            for rep in 0..plan.reps {
                for kind in rotated(&kinds, rep) {
                    let mut r = scenarios::cycles(
                        &mut probe,
                        &contenders,
                        kind,
                        &format!("b2-{tasks}"),
                        tasks,
                        plan.warmup,
                        plan.measure,
                    )
                    .await?;
                    let row = [
                        r.per_sec,
                        r.latency.quantile_us(0.5),
                        r.latency.quantile_us(0.99),
                        r.work.cpu_us,
                        r.work.calls,
                        r.work.client_cpu_us,
                    ];
                    eprintln!(
                        "B2 {tasks:>3} tasks rep {rep} {:<30} {:>9.0} cycles/s",
                        kind.label(),
                        row[0]
                    );
                    runs.entry(kind).or_default().push(row);
                }
            }
            report
                .per_rep
                .insert(format!("B2 {tasks}"), throughputs(&runs));
            report.b2.push((
                tasks,
                kinds.iter().map(|k| (*k, median_cols(&runs[k]))).collect(),
            ));
        }
    }

    if plan.runs("B3") {
        for tasks in [8, 32] {
            flush(&mut admin).await?;
            let mut runs: HashMap<Kind, Vec<[f64; 9]>> = HashMap::new();
            let mut violations: HashMap<Kind, u64> = HashMap::new();
            for rep in 0..plan.reps {
                for kind in rotated(&kinds, rep) {
                    let mut r = scenarios::handoffs(
                        &mut probe,
                        &contenders,
                        kind,
                        &format!("b3-{tasks}-{rep}"),
                        tasks,
                        plan.warmup,
                        plan.measure,
                    )
                    .await?;
                    let row = [
                        r.per_sec,
                        r.gaps.quantile_us(0.5),
                        r.gaps.quantile_us(0.99),
                        r.min_share,
                        r.max_share,
                        r.jain,
                        r.work.cpu_us,
                        r.work.calls,
                        r.work.client_cpu_us,
                    ];
                    eprintln!(
                        "B3 {tasks:>2} tasks rep {rep} {:<30} {:>8.0} sections/s  gap p50 {:>7.1} µs",
                        kind.label(),
                        row[0],
                        row[1]
                    );
                    *violations.entry(kind).or_default() += r.violations;
                    runs.entry(kind).or_default().push(row);
                }
            }
            report
                .per_rep
                .insert(format!("B3 {tasks}"), throughputs(&runs));
            for kind in &kinds {
                let m = median_cols(&runs[kind]);
                report.b3.push(B3Row {
                    tasks,
                    kind: *kind,
                    per_sec: m[0],
                    gap_p50_us: m[1],
                    gap_p99_us: m[2],
                    min_share: m[3],
                    max_share: m[4],
                    jain: m[5],
                    server_cpu_us: m[6],
                    server_calls: m[7],
                    client_cpu_us: m[8],
                    violations: violations[kind],
                });
            }
        }
    }

    if plan.runs("B4") {
        let renewers = [
            Renewer::Distlock { batch: 256 },
            Renewer::Distlock { batch: 64 },
            Renewer::AsyncRedisLock,
        ];
        for renewer in renewers {
            flush(&mut admin).await?;
            let r = scenarios::renewal(
                &url,
                renewer,
                plan.renew_held,
                plan.renew_ttl,
                plan.renew_measure,
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
    }

    if plan.runs("B5") {
        let shapes = [(1, 1), (5, 1), (5, 5)];
        let mut runs: HashMap<(usize, usize, market::Variant), Vec<market::MarketRun>> =
            HashMap::new();
        for rep in 0..plan.market_reps {
            for &(sellers, buyers) in &shapes {
                for variant in rotated(&market::Variant::ALL, rep) {
                    let r = market::run(&url, variant, sellers, buyers, plan.market_secs).await?;
                    eprintln!(
                        "B5 {sellers}/{buyers} rep {rep} {:<30} listed {:>7} bought {:>7} retries {:>7} avg {:.2} ms p99 {:.2} ms",
                        variant.label(),
                        r.listed,
                        r.bought,
                        r.retries,
                        r.avg_buy_ms,
                        r.p99_buy_ms
                    );
                    runs.entry((sellers, buyers, variant)).or_default().push(r);
                }
            }
        }
        for &(sellers, buyers) in &shapes {
            for variant in market::Variant::ALL {
                let rs = &runs[&(sellers, buyers, variant)];
                let col = |f: fn(&market::MarketRun) -> f64| {
                    median(&rs.iter().map(f).collect::<Vec<_>>())
                };
                report.b5.push(B5Row {
                    sellers,
                    buyers,
                    variant,
                    listed: col(|r| r.listed as f64),
                    bought: col(|r| r.bought as f64),
                    bought_per_sec: col(|r| r.bought as f64 / r.elapsed.as_secs_f64()),
                    missed: col(|r| r.missed as f64),
                    retries: col(|r| r.retries as f64),
                    avg_buy_ms: col(|r| r.avg_buy_ms),
                    p99_buy_ms: col(|r| r.p99_buy_ms),
                });
            }
        }
    }

    let text = report.render();
    println!("{text}");
    if !env_flag("BENCH_NO_WRITE") {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md");
        std::fs::write(path, &text)?;
        eprintln!("wrote {path}");
    }
    drop(contenders);
    drop(server);
    Ok(())
}

/// `BENCH_PROFILE=<floor|manual|macro|rslock|arl>`: only sequential B1 cycles of one contender
/// (`BENCH_PROFILE_CYCLES`, default 20,000), for `valgrind --tool=callgrind` or `perf`.
async fn profile(contenders: &Contenders, which: &str) -> BenchResult<()> {
    let kind = *[Kind::Ping]
        .iter()
        .chain(&Kind::ALL)
        .find(|k| k.tag() == which)
        .ok_or_else(|| format!("BENCH_PROFILE={which}: no such contender"))?;
    let cycles = env_f64("BENCH_PROFILE_CYCLES").map_or(20_000, |n| n as usize);
    let target = contenders::Target::new("profile", kind, 0, 0);
    let t0 = std::time::Instant::now();
    for _ in 0..cycles {
        contenders.cycle(kind, &target).await?;
    }
    let elapsed = t0.elapsed();
    eprintln!(
        "profile {}: {cycles} cycles in {elapsed:?} ({:.1} µs/cycle)",
        kind.label(),
        elapsed.as_secs_f64() * 1e6 / cycles as f64
    );
    Ok(())
}

/// The first column (throughput) of every repetition's row.
fn throughputs<const N: usize>(runs: &HashMap<Kind, Vec<[f64; N]>>) -> HashMap<Kind, Vec<f64>> {
    runs.iter()
        .map(|(k, rows)| (*k, rows.iter().map(|r| r[0]).collect()))
        .collect()
}

/// Column-wise medians of per-repetition rows.
fn median_cols<const N: usize>(rows: &[[f64; N]]) -> [f64; N] {
    std::array::from_fn(|i| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>()))
}

async fn flush(conn: &mut redis::aio::MultiplexedConnection) -> BenchResult<()> {
    redis::cmd("FLUSHALL").exec_async(conn).await?;
    Ok(())
}
