//! B1–B4: one run of one scenario for one contender, plus the PING round-trip baseline.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::contenders::{
    BenchError, BenchResult, Contenders, Handoffs, Hold, Kind, Recorder, Section, Target,
};
use crate::probe::{measured_window, Probe, Work};
use crate::stats::{jain, CycleRow, HandoffRow, Samples};

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

/// What [`Runner::cycles`] measured.
pub(crate) struct CycleRun {
    pub(crate) per_sec: f64,
    pub(crate) latency: Samples,
    /// Work per cycle.
    pub(crate) work: Work,
}

impl CycleRun {
    /// The run as a B1/B2 table row (see [`CycleRow`]).
    pub(crate) fn row(&mut self) -> CycleRow {
        [
            self.per_sec,
            self.latency.quantile_us(0.5),
            self.latency.quantile_us(0.99),
            self.work.cpu_us,
            self.work.calls,
            self.work.client_cpu_us,
        ]
    }
}

/// What [`Runner::handoffs`] measured.
pub(crate) struct HandoffRun {
    pub(crate) per_sec: f64,
    /// Release returned → next acquire returned.
    pub(crate) gaps: Samples,
    /// The waits (acquire called → returned) of the sections by the waiter's position: how
    /// many other sections entered while it waited (the last bucket: that many or more).
    pub(crate) waits: Vec<Samples>,
    pub(crate) min_share: f64,
    pub(crate) max_share: f64,
    pub(crate) jain: f64,
    pub(crate) violations: u64,
    /// Work per critical section.
    pub(crate) work: Work,
}

impl HandoffRun {
    /// The run as a B3 table row (see [`HandoffRow`]); overlaps are summed, not medianed, so
    /// they stay out.
    pub(crate) fn row(&mut self) -> HandoffRow {
        [
            self.per_sec,
            self.gaps.quantile_us(0.5),
            self.gaps.quantile_us(0.99),
            self.min_share,
            self.max_share,
            self.jain,
            self.work.cpu_us,
            self.work.calls,
            self.work.client_cpu_us,
        ]
    }
}

/// Runs B1–B3 for one contender at a time: every run has the same warm-up and measured
/// window and charges its Redis and client work through the same probe.
pub(crate) struct Runner {
    probe: Probe,
    contenders: Arc<Contenders>,
    warmup: Duration,
    measure: Duration,
}

impl Runner {
    pub(crate) fn new(
        probe: Probe,
        contenders: Arc<Contenders>,
        warmup: Duration,
        measure: Duration,
    ) -> Runner {
        Runner {
            probe,
            contenders,
            warmup,
            measure,
        }
    }

    /// B1/B2 (and S1): `tasks` tasks, each on its own key, acquire + release of `hold` in a
    /// loop.
    pub(crate) async fn cycles(
        &mut self,
        kind: Kind,
        scenario: &str,
        tasks: usize,
        hold: Hold,
    ) -> BenchResult<CycleRun> {
        let (c, warmup, measure) = (&self.contenders, self.warmup, self.measure);
        let start = Instant::now() + warmup;
        let end = start + measure;
        let mut handles = Vec::with_capacity(tasks);
        for i in 0..tasks {
            let c = c.clone();
            let target = Target::new(scenario, kind, i, i).holding(hold);
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
        let (work, per_task) = measured_window(&mut self.probe, start, end, handles).await?;
        let mut latency = Samples::default();
        for task_latency in per_task {
            latency.extend(task_latency);
        }
        Ok(CycleRun {
            per_sec: latency.len() as f64 / measure.as_secs_f64(),
            work: work.per(latency.len() as f64),
            latency,
        })
    }

    /// B3 (and S2): `tasks` tasks on one key, each waiting for `hold` (one of its permits:
    /// S2), in a loop.
    pub(crate) async fn handoffs(
        &mut self,
        kind: Kind,
        scenario: &str,
        tasks: usize,
        hold: Hold,
    ) -> BenchResult<HandoffRun> {
        let (c, warmup, measure) = (&self.contenders, self.warmup, self.measure);
        let origin = Instant::now();
        let start = origin + warmup;
        let end = start + measure;
        let log = Arc::new(Handoffs::new(origin, hold.capacity()));
        let mut handles = Vec::with_capacity(tasks);
        for task in 0..tasks {
            let c = c.clone();
            let log = log.clone();
            let target = Target::new(scenario, kind, 0, task).holding(hold);
            handles.push(tokio::spawn(async move {
                let rec = Recorder::new(&log, task as u32);
                while Instant::now() < end {
                    rec.ask();
                    c.section(kind, &target, &rec).await?;
                }
                BenchResult::Ok(())
            }));
        }
        let (work, _) = measured_window(&mut self.probe, start, end, handles).await?;
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
        // With at most `n` holders inside, the i-th section (in entry order) entered once at
        // least i + 1 - n sections had left: its handoff is from the (i - n)-th release in time
        // order (for a lock, n = 1: the previous section's release).
        let n = hold.capacity().min(tasks as u32) as usize;
        let mut releases: Vec<u64> = sections
            .iter()
            .map(|s| s.released)
            .filter(|&r| r > 0)
            .collect();
        releases.sort_unstable();
        for (i, s) in sections.iter().enumerate() {
            if s.entered < lo || s.entered >= hi {
                continue;
            }
            counted += 1;
            per_task[s.task as usize] += 1;
            if let Some(j) = i.checked_sub(n) {
                if let (true, Some(&released)) = (sections[j].entered >= lo, releases.get(j)) {
                    // A release observed after the next acquire (scheduling) counts as no gap.
                    gaps.push_nanos(s.entered.saturating_sub(released));
                }
            }
        }
        let fair = counted as f64 / tasks as f64;
        let waits = waits_by_position(&sections, (lo, hi), 2 * tasks);
        Ok(HandoffRun {
            per_sec: counted as f64 / measure.as_secs_f64(),
            gaps,
            waits,
            min_share: *per_task.iter().min().unwrap_or(&0) as f64 / fair,
            max_share: *per_task.iter().max().unwrap_or(&0) as f64 / fair,
            jain: jain(&per_task),
            violations,
            work: work.per(counted as f64),
        })
    }
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
    let mut client_keepalive = None;
    let held_locks = match renewer {
        Renewer::Distlock { batch } => {
            let client = distlock::Config::new(url)
                .renew_batch_size(batch)
                .connect()
                .await?;
            let acquirer = client.clone();
            let guards = acquire_all(&targets, move |t| {
                acquirer.lock(t.name()).ttl(ttl).renew(true).acquire()
            })
            .await?;
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
            let locks = acquire_all(&targets, move |t| {
                let (locker, options) = (locker.clone(), options.clone());
                let key = t.redis_key(kind).to_owned();
                async move { locker.acquire_with_options(&options, key).await }
            })
            .await?;
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
            release_all(guards, distlock::LockGuard::release).await?;
        }
        Held::Arl(locks) => {
            lost += locks.iter().filter(|l| l.is_lost()).count() as u64;
            release_all(locks, async_redis_lock::Lock::release).await?;
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

/// Locks are taken and released by this many concurrent tasks, so that setting up and
/// tearing down 10,000 locks takes seconds rather than minutes.
const ACQUIRERS: usize = 64;

/// Every target's lock, taken by [`ACQUIRERS`] tasks, each taking every `ACQUIRERS`-th target.
async fn acquire_all<L, E, Fut>(
    targets: &Arc<Vec<Target>>,
    acquire: impl Fn(&Target) -> Fut + Clone + Send + 'static,
) -> BenchResult<Vec<L>>
where
    L: Send + 'static,
    E: Into<BenchError>,
    Fut: Future<Output = Result<L, E>> + Send,
{
    let handles: Vec<_> = (0..ACQUIRERS)
        .map(|a| {
            let (targets, acquire) = (targets.clone(), acquire.clone());
            tokio::spawn(async move {
                let mut locks = Vec::new();
                for t in targets.iter().skip(a).step_by(ACQUIRERS) {
                    locks.push(acquire(t).await.map_err(Into::into)?);
                }
                BenchResult::Ok(locks)
            })
        })
        .collect();
    let mut locks = Vec::with_capacity(targets.len());
    for h in handles {
        locks.extend(h.await??);
    }
    Ok(locks)
}

/// Releases every lock from [`ACQUIRERS`] concurrent tasks.
async fn release_all<L, E, Fut>(
    locks: Vec<L>,
    release: impl Fn(L) -> Fut + Copy + Send + 'static,
) -> BenchResult<()>
where
    L: Send + 'static,
    E: Into<BenchError>,
    Fut: Future<Output = Result<(), E>> + Send,
{
    let mut chunks: Vec<Vec<L>> = (0..ACQUIRERS).map(|_| Vec::new()).collect();
    for (i, l) in locks.into_iter().enumerate() {
        chunks[i % ACQUIRERS].push(l);
    }
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            tokio::spawn(async move {
                for l in chunk {
                    release(l).await.map_err(Into::into)?;
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

/// The waits of the sections entered in `window` (acquire called → returned), by how many other
/// sections entered while each waited (its position in line when it asked, for a FIFO lock),
/// in `buckets` buckets (the last: that many or more).
fn waits_by_position(sections: &[Section], (lo, hi): (u64, u64), buckets: usize) -> Vec<Samples> {
    let mut entered: Vec<u64> = sections.iter().map(|s| s.entered).collect();
    entered.sort_unstable();
    let mut waits: Vec<Samples> = (0..buckets).map(|_| Samples::with_capacity(0)).collect();
    for s in sections {
        if s.asked == 0 || s.entered < lo || s.entered >= hi {
            continue;
        }
        let before = entered.partition_point(|&e| e <= s.asked);
        let upto = entered.partition_point(|&e| e < s.entered);
        let position = upto.saturating_sub(before).min(buckets - 1);
        waits[position].push_nanos(s.entered - s.asked);
    }
    waits
}
