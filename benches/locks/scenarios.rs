//! B1–B4: one run of one scenario for one contender, plus the PING round-trip baseline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::contenders::{BenchResult, Contenders, Handoffs, Kind, Recorder, Target};
use crate::stats::{jain, Samples};

/// Median PING round trip in microseconds over `n` sequential pings.
pub(crate) async fn ping_rtt_us(conn: &mut MultiplexedConnection, n: usize) -> BenchResult<f64> {
    let mut samples = Samples::with_capacity(n);
    for i in 0..n + n / 10 {
        let t0 = Instant::now();
        redis::cmd("PING").exec_async(conn).await?;
        if i >= n / 10 {
            samples.push(t0.elapsed());
        }
    }
    Ok(samples.quantile_us(0.5))
}

/// Reads the server's CPU time and per-command call counts, to charge Redis work to a run.
pub(crate) struct Probe {
    conn: MultiplexedConnection,
}

/// One reading of [`Probe`].
pub(crate) struct Snapshot {
    cpu_us: f64,
    client_cpu_us: f64,
    calls: HashMap<String, u64>,
}

/// The work between two snapshots, on both sides of the connection.
#[derive(Clone, Copy)]
pub(crate) struct Work {
    /// CPU time of redis-server (user + system), µs.
    pub(crate) cpu_us: f64,
    /// Commands executed (scripts and every command they ran), without the probe's own INFO.
    pub(crate) calls: f64,
    /// CPU time of this process (all threads: the runtime's workers, the contenders), µs.
    pub(crate) client_cpu_us: f64,
}

impl Work {
    pub(crate) fn per(self, n: f64) -> Work {
        Work {
            cpu_us: self.cpu_us / n,
            calls: self.calls / n,
            client_cpu_us: self.client_cpu_us / n,
        }
    }
}

/// CPU time of every thread of this process in µs, from `/proc/self/task/*/schedstat` (ns
/// resolution; 0 where unavailable).
fn process_cpu_us() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 1000.0
}

impl Probe {
    pub(crate) fn new(conn: MultiplexedConnection) -> Probe {
        Probe { conn }
    }

    pub(crate) async fn snapshot(&mut self) -> BenchResult<Snapshot> {
        let client_cpu_us = process_cpu_us();
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await?;
        let mut cpu_us = 0.0;
        for line in info.lines() {
            if let Some(v) = line
                .strip_prefix("used_cpu_sys:")
                .or_else(|| line.strip_prefix("used_cpu_user:"))
            {
                cpu_us += v.trim().parse::<f64>().unwrap_or(0.0) * 1e6;
            }
        }
        Ok(Snapshot {
            cpu_us,
            client_cpu_us,
            calls: parse_command_stats(&info),
        })
    }
}

impl Snapshot {
    pub(crate) fn work_since(&self, before: &Snapshot) -> Work {
        let calls: u64 = self
            .calls
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(name, &n)| n - before.calls.get(name).copied().unwrap_or(0))
            .sum();
        Work {
            cpu_us: self.cpu_us - before.cpu_us,
            calls: calls as f64,
            client_cpu_us: self.client_cpu_us - before.client_cpu_us,
        }
    }
}

/// B1/B2: `tasks` tasks, each on its own key, acquire + release in a loop.
pub(crate) struct CycleRun {
    pub(crate) per_sec: f64,
    pub(crate) latency: Samples,
    /// Work per cycle.
    pub(crate) work: Work,
}

pub(crate) async fn cycles(
    probe: &mut Probe,
    c: &Arc<Contenders>,
    kind: Kind,
    scenario: &str,
    tasks: usize,
    warmup: Duration,
    measure: Duration,
) -> BenchResult<CycleRun> {
    let start = Instant::now() + warmup;
    let end = start + measure;
    let mut handles = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let c = c.clone();
        let target = Target::new(scenario, kind, i, i);
        handles.push(tokio::spawn(async move {
            let mut latency = Samples::with_capacity(1 << 14);
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                c.cycle(kind, &target).await?;
                if t0 >= start {
                    latency.push(t0.elapsed());
                }
            }
            BenchResult::Ok(latency)
        }));
    }
    tokio::time::sleep_until(start).await;
    let before = probe.snapshot().await?;
    tokio::time::sleep_until(end).await;
    let work = probe.snapshot().await?.work_since(&before);
    let mut latency = Samples::default();
    for handle in handles {
        latency.extend(handle.await??);
    }
    Ok(CycleRun {
        per_sec: latency.len() as f64 / measure.as_secs_f64(),
        work: work.per(latency.len() as f64),
        latency,
    })
}

/// B3: `tasks` tasks on one key, each waiting for it, in a loop.
pub(crate) struct HandoffRun {
    pub(crate) per_sec: f64,
    /// Release returned → next acquire returned.
    pub(crate) gaps: Samples,
    pub(crate) min_share: f64,
    pub(crate) max_share: f64,
    pub(crate) jain: f64,
    pub(crate) violations: u64,
    /// Work per critical section.
    pub(crate) work: Work,
}

pub(crate) async fn handoffs(
    probe: &mut Probe,
    c: &Arc<Contenders>,
    kind: Kind,
    scenario: &str,
    tasks: usize,
    warmup: Duration,
    measure: Duration,
) -> BenchResult<HandoffRun> {
    let origin = Instant::now();
    let start = origin + warmup;
    let end = start + measure;
    let log = Arc::new(Handoffs::new(origin));
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let c = c.clone();
        let log = log.clone();
        let target = Target::new(scenario, kind, 0, task);
        handles.push(tokio::spawn(async move {
            let rec = Recorder::new(&log, task as u32);
            while Instant::now() < end {
                c.section(kind, &target, &rec).await?;
            }
            BenchResult::Ok(())
        }));
    }
    tokio::time::sleep_until(start).await;
    let before = probe.snapshot().await?;
    tokio::time::sleep_until(end).await;
    let work = probe.snapshot().await?.work_since(&before);
    for handle in handles {
        handle.await??;
    }
    let log = Arc::into_inner(log).expect("all tasks finished");
    let violations = log.violations();
    let sections = log.into_sections();
    let (lo, hi) = (
        (start - origin).as_nanos() as u64,
        (end - origin).as_nanos() as u64,
    );
    let mut per_task = vec![0u64; tasks];
    let mut gaps = Samples::with_capacity(sections.len());
    let mut counted = 0u64;
    for (i, s) in sections.iter().enumerate() {
        if s.entered < lo || s.entered >= hi {
            continue;
        }
        counted += 1;
        per_task[s.task as usize] += 1;
        if i > 0 {
            let prev = sections[i - 1];
            if prev.released > 0 && prev.entered >= lo {
                // A release observed after the next acquire (scheduling) counts as no gap.
                gaps.push_nanos(s.entered.saturating_sub(prev.released));
            }
        }
    }
    let fair = counted as f64 / tasks as f64;
    Ok(HandoffRun {
        per_sec: counted as f64 / measure.as_secs_f64(),
        gaps,
        min_share: *per_task.iter().min().unwrap_or(&0) as f64 / fair,
        max_share: *per_task.iter().max().unwrap_or(&0) as f64 / fair,
        jain: jain(&per_task),
        violations,
        work: work.per(counted as f64),
    })
}

/// B4: which implementation renews the leases.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Renewer {
    /// distlock's watchdog with this batch size.
    Distlock { batch: usize },
    /// async-redis-lock: one renewal task per lock.
    AsyncRedisLock,
}

impl Renewer {
    pub(crate) fn label(self) -> String {
        match self {
            Renewer::Distlock { batch } => format!("distlock (batch {batch})"),
            Renewer::AsyncRedisLock => "async-redis-lock 0.4 (task per lock)".to_owned(),
        }
    }
}

pub(crate) struct RenewRun {
    /// Script calls (round trips) per second spent on renewal.
    pub(crate) round_trips_per_sec: f64,
    /// Every command Redis executed for renewal (script calls and the commands they ran).
    pub(crate) commands_per_sec: f64,
    /// redis-server CPU time per second of wall time, in ms (the PTTL sampler included).
    pub(crate) cpu_ms_per_sec: f64,
    /// Smallest PTTL seen by the sampler, in ms.
    pub(crate) min_pttl_ms: i64,
    pub(crate) pttl_samples: u64,
    /// Locks found missing by the sampler or reported lost by the library.
    pub(crate) lost: u64,
}

enum Held {
    Distlock(Vec<distlock::LockGuard>),
    Arl(Vec<async_redis_lock::Lock>),
}

pub(crate) async fn renewal(
    url: &str,
    renewer: Renewer,
    held: usize,
    ttl: Duration,
    measure: Duration,
) -> BenchResult<RenewRun> {
    let redis = redis::Client::open(url)?;
    let stats_conn = redis.get_multiplexed_async_connection().await?;
    let kind = match renewer {
        Renewer::Distlock { .. } => Kind::Manual,
        Renewer::AsyncRedisLock => Kind::AsyncRedisLock,
    };
    let targets: Arc<Vec<Target>> =
        Arc::new((0..held).map(|i| Target::new("b4", kind, i, i)).collect());
    // Acquire everything with 64 concurrent acquirers.
    const ACQUIRERS: usize = 64;
    let mut client_keepalive = None;
    let held_locks = match renewer {
        Renewer::Distlock { batch } => {
            let client = distlock::Config::new(url)
                .renew_batch_size(batch)
                .connect()
                .await?;
            let mut handles = Vec::new();
            for a in 0..ACQUIRERS {
                let (client, targets) = (client.clone(), targets.clone());
                handles.push(tokio::spawn(async move {
                    let mut guards = Vec::new();
                    for t in targets.iter().skip(a).step_by(ACQUIRERS) {
                        guards.push(client.lock(t.name()).ttl(ttl).renew(true).acquire().await?);
                    }
                    BenchResult::Ok(guards)
                }));
            }
            let mut guards = Vec::with_capacity(held);
            for h in handles {
                guards.extend(h.await??);
            }
            client_keepalive = Some(client);
            Held::Distlock(guards)
        }
        Renewer::AsyncRedisLock => {
            let locker = async_redis_lock::Locker::from_redis_url(url).await?;
            // Its defaults: ttl 3 s renewed every 1 s, the same ratio as distlock's ttl/3.
            let options = async_redis_lock::Options::new()
                .ttl(ttl)
                .extend(ttl / 3)
                .timeout(Some(Duration::from_secs(10)));
            let mut handles = Vec::new();
            for a in 0..ACQUIRERS {
                let (locker, targets, options) = (locker.clone(), targets.clone(), options.clone());
                handles.push(tokio::spawn(async move {
                    let mut locks = Vec::new();
                    for t in targets.iter().skip(a).step_by(ACQUIRERS) {
                        locks.push(
                            locker
                                .acquire_with_options(&options, t.redis_key(kind))
                                .await?,
                        );
                    }
                    BenchResult::Ok(locks)
                }));
            }
            let mut locks = Vec::with_capacity(held);
            for h in handles {
                locks.extend(h.await??);
            }
            Held::Arl(locks)
        }
    };
    // Let renewal reach its steady rhythm before counting.
    tokio::time::sleep(ttl / 3).await;

    let sampler_stop = Arc::new(AtomicBool::new(false));
    let min_pttl = Arc::new(AtomicI64::new(i64::MAX));
    let missing = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(AtomicU64::new(0));
    let sampler = {
        let mut conn = redis.get_multiplexed_async_connection().await?;
        let (stop, min_pttl, missing, samples, targets) = (
            sampler_stop.clone(),
            min_pttl.clone(),
            missing.clone(),
            samples.clone(),
            targets.clone(),
        );
        tokio::spawn(async move {
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            while !stop.load(Ordering::Relaxed) {
                let mut pipe = redis::pipe();
                for _ in 0..500 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let t = &targets[(rng % targets.len() as u64) as usize];
                    pipe.cmd("PTTL").arg(t.redis_key(kind));
                }
                let pttls: Vec<i64> = pipe.query_async(&mut conn).await?;
                for p in pttls {
                    samples.fetch_add(1, Ordering::Relaxed);
                    if p < 0 {
                        missing.fetch_add(1, Ordering::Relaxed);
                    } else {
                        min_pttl.fetch_min(p, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            BenchResult::Ok(())
        })
    };

    let mut probe = Probe::new(stats_conn);
    let before = probe.snapshot().await?;
    let t0 = Instant::now();
    tokio::time::sleep(measure).await;
    let after = probe.snapshot().await?;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu_ms_per_sec = after.work_since(&before).cpu_us / 1000.0 / elapsed;
    let (before, after) = (before.calls, after.calls);
    sampler_stop.store(true, Ordering::Relaxed);
    sampler.await??;

    let delta =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    let total: u64 = after.keys().map(|k| delta(k)).sum();
    // The sampler's PTTLs and the INFO calls themselves are not renewal work.
    let renewal_commands = total - delta("pttl") - delta("info");
    let round_trips = delta("evalsha") + delta("eval");

    let mut lost = missing.load(Ordering::Relaxed);
    match held_locks {
        Held::Distlock(guards) => {
            lost += guards.iter().filter(|g| g.lost_reason().is_some()).count() as u64;
            release_all_distlock(guards).await?;
        }
        Held::Arl(locks) => {
            lost += locks.iter().filter(|l| l.is_lost()).count() as u64;
            release_all_arl(locks).await?;
        }
    }
    drop(client_keepalive);
    Ok(RenewRun {
        round_trips_per_sec: round_trips as f64 / elapsed,
        commands_per_sec: renewal_commands as f64 / elapsed,
        cpu_ms_per_sec,
        min_pttl_ms: min_pttl.load(Ordering::Relaxed),
        pttl_samples: samples.load(Ordering::Relaxed),
        lost,
    })
}

async fn release_all_distlock(guards: Vec<distlock::LockGuard>) -> BenchResult<()> {
    let mut chunks: Vec<Vec<distlock::LockGuard>> = (0..64).map(|_| Vec::new()).collect();
    for (i, g) in guards.into_iter().enumerate() {
        chunks[i % 64].push(g);
    }
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            tokio::spawn(async move {
                for g in chunk {
                    g.release().await?;
                }
                BenchResult::Ok(())
            })
        })
        .collect();
    for h in handles {
        h.await??;
    }
    Ok(())
}

async fn release_all_arl(locks: Vec<async_redis_lock::Lock>) -> BenchResult<()> {
    let mut chunks: Vec<Vec<async_redis_lock::Lock>> = (0..64).map(|_| Vec::new()).collect();
    for (i, l) in locks.into_iter().enumerate() {
        chunks[i % 64].push(l);
    }
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            tokio::spawn(async move {
                for l in chunk {
                    l.release().await?;
                }
                BenchResult::Ok(())
            })
        })
        .collect();
    for h in handles {
        h.await??;
    }
    Ok(())
}

/// `calls` per command from the `commandstats` section of `INFO`.
fn parse_command_stats(info: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        out.insert(name.to_owned(), calls);
    }
    out
}
