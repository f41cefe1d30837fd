//! Failover safety over Redis Sentinel in the shape the Redis docs recommend: a master, **two**
//! replicas and three sentinels (`down-after-milliseconds` 1 s). A holder takes a renewed,
//! fenced lock with `min_replicas`, asks `ensure_held()` every 25 ms and records each `Ok`; a
//! contender on another client keeps trying to take the same lock (without `min_replicas`, the
//! most eager acquirer there is) and records each success. The invariant, checked after each
//! fault: **no contender takes the lock before the holder's last `Ok`** (the holder never
//! believes after another client took the lock). The faults: `SENTINEL FAILOVER` (planned:
//! the lock must also be kept), the master `SIGKILL`ed, and the master `SIGSTOP`ped past
//! `down-after-milliseconds` (it resumes still believing it is master).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Client, Config, LockGuard};
use testkit::{RedisSentinel, SentinelOptions};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(6);

fn group() -> RedisSentinel {
    RedisSentinel::start_with(SentinelOptions {
        replicas: 2,
        down_after: Duration::from_secs(1),
    })
}

async fn client(group: &RedisSentinel) -> Client {
    Config::sentinel(group.sentinel_urls(), RedisSentinel::SERVICE)
        .connect()
        .await
        .expect("connect through the sentinels")
}

/// What the holder and the contender saw.
#[derive(Default)]
struct Timeline {
    /// The most the holder's deadline exceeded the expiry of its key on the master the
    /// sentinels named at that moment (sampled with each `ensure_held()`).
    worst_gap: Duration,
    /// The longest stretch of samples with such a gap: how long the holder's belief outran
    /// the named master before the client heard of the switch and confirmed its lease there.
    longest_gap: Duration,
    gap_since: Option<Instant>,
    /// Each `ensure_held()` that said `Ok`.
    held: Vec<Instant>,
    /// The holder was told the lock is lost (when, and the error).
    lost: Option<(Instant, String)>,
    /// Each acquire the contender won.
    taken: Vec<Instant>,
}

impl Timeline {
    /// The longest time the holder went on believing after the contender took the lock (zero:
    /// never).
    fn worst_overlap(&self) -> Duration {
        let Some(first) = self.taken.first() else {
            return Duration::ZERO;
        };
        self.held
            .iter()
            .filter(|h| *h >= first)
            .map(|h| h.duration_since(*first))
            .max()
            .unwrap_or(Duration::ZERO)
    }
}

/// Runs the holder and the contender for `run` (the contender connects `contender_from` after
/// the start); `fault` is called (off the runtime's threads) 1 s after the lock was taken.
async fn scenario(
    group: Arc<RedisSentinel>,
    replicas: usize,
    (run, contender_from): (Duration, Duration),
    fault: impl FnOnce(&RedisSentinel) + Send + 'static,
) -> (Timeline, LockGuard) {
    let holder = client(&group).await;
    let guard = holder
        .lock("failover")
        .ttl(TTL)
        .renew(true)
        .fenced(true)
        .min_replicas(replicas)
        .acquire()
        .await
        .expect("taken and acknowledged");
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let end = Instant::now() + run;
    let contending = tokio::spawn({
        let (timeline, group) = (timeline.clone(), group.clone());
        async move {
            // A contender that connects late connects in the middle of the fault.
            tokio::time::sleep(contender_from).await;
            let contender = client(&group).await;
            while Instant::now() < end {
                if let Ok(g) = contender.lock("failover").ttl(TTL).acquire().await {
                    timeline.lock().unwrap().taken.push(Instant::now());
                    // Kept: the holder must find out it lost the lock.
                    std::mem::forget(g);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    let faulting = tokio::spawn({
        let group = group.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            tokio::task::spawn_blocking(move || fault(&group))
                .await
                .unwrap();
        }
    });
    let sentinel = redis::Client::open(group.sentinel_urls()[0].as_str()).unwrap();
    let mut sentinel = sentinel.get_multiplexed_async_connection().await.unwrap();
    while Instant::now() < end {
        let now = Instant::now();
        let deadline = guard.guaranteed_until();
        match guard.ensure_held() {
            Ok(()) => {
                let gap = gap(&mut sentinel, &group, deadline).await;
                let mut t = timeline.lock().unwrap();
                t.held.push(now);
                t.worst_gap = t.worst_gap.max(gap);
                if gap > Duration::ZERO {
                    let since = *t.gap_since.get_or_insert(now);
                    t.longest_gap = t.longest_gap.max(now - since);
                } else {
                    t.gap_since = None;
                }
            }
            Err(error) => {
                timeline.lock().unwrap().lost = Some((now, error.to_string()));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    contending.await.unwrap();
    faulting.await.unwrap();
    let timeline = Arc::try_unwrap(timeline)
        .ok()
        .unwrap()
        .into_inner()
        .unwrap();
    (timeline, guard)
}

/// How much later than `deadline` (the holder's) the key expires on the master the sentinels
/// name now (zero if it expires later; the whole remaining time if it is not there at all).
async fn gap(
    sentinel: &mut redis::aio::MultiplexedConnection,
    group: &RedisSentinel,
    deadline: Instant,
) -> Duration {
    let named: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(RedisSentinel::SERVICE)
        .query_async(sentinel)
        .await
        .unwrap();
    let Some((_, port)) = named else {
        return Duration::ZERO;
    };
    let Ok(mut conn) = group
        .server(port)
        .client()
        .get_multiplexed_async_connection()
        .await
    else {
        return Duration::ZERO;
    };
    let pttl: i64 = match redis::cmd("PTTL")
        .arg("distlock:{failover}")
        .query_async(&mut conn)
        .await
    {
        Ok(pttl) => pttl,
        Err(_) => return Duration::ZERO,
    };
    let expires = Instant::now() + Duration::from_millis(pttl.max(0) as u64);
    deadline.saturating_duration_since(expires)
}

fn report(what: &str, t: &Timeline) {
    eprintln!(
        "{what}: {} held checks, lost {:?}, contender took it {} times (first at +{:?} after last hold?), worst overlap {:?}, worst deadline gap {:?} for {:?}",
        t.held.len(),
        t.lost.as_ref().map(|(_, e)| e.clone()),
        t.taken.len(),
        t.taken.first().zip(t.held.last()).map(|(c, h)| c.saturating_duration_since(*h)),
        t.worst_overlap(),
        t.worst_gap,
        t.longest_gap
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_failover_keeps_a_renewed_lock_with_no_second_holder() {
    let group = Arc::new(group());
    let (timeline, guard) = scenario(
        group.clone(),
        1,
        (Duration::from_secs(14), Duration::ZERO),
        |group| {
            group.failover();
        },
    )
    .await;
    report("SENTINEL FAILOVER", &timeline);
    assert_no_second_holder(&timeline);
    assert!(timeline.taken.is_empty(), "no second holder");
    assert!(timeline.lost.is_none(), "the lock survived the failover");
    guard.release().await.expect("released on the new master");
}

/// The invariant: the contender never took the lock while the holder still believed, and the
/// holder's belief never outran the named master for long (before the fix: until its next
/// scheduled renewal, ~2 s with this ttl).
fn assert_no_second_holder(t: &Timeline) {
    assert_eq!(t.worst_overlap(), Duration::ZERO, "a second holder");
    assert!(
        t.longest_gap < Duration::from_millis(1200),
        "the holder believed beyond the new master's expiry for {:?}",
        t.longest_gap
    );
}

/// Sends `signal` to the current master by PID; returns its port.
fn signal_master(group: &RedisSentinel, signal: &str) -> u16 {
    let master = group.master();
    let status = std::process::Command::new("kill")
        .args([signal, &master.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal}");
    master.port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_never_two_holders() {
    let group = Arc::new(group());
    let (timeline, guard) = scenario(
        group.clone(),
        1,
        (Duration::from_secs(12), Duration::ZERO),
        |group| {
            let old = signal_master(group, "-KILL");
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while group.promoted(old).is_none() {
                assert!(std::time::Instant::now() < deadline, "no promotion");
                std::thread::sleep(Duration::from_millis(50));
            }
        },
    )
    .await;
    report("master SIGKILL", &timeline);
    assert_no_second_holder(&timeline);
    drop(guard);
}

/// The master frozen past `down-after-milliseconds`: the sentinels promote a replica, and the
/// old master resumes still believing it is one. The contender connects while it is frozen
/// (where a client used to bind to the resumed old master and take the lock there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_frozen_through_a_failover_never_two_holders() {
    let group = Arc::new(group());
    let (timeline, guard) = scenario(
        group.clone(),
        1,
        (Duration::from_secs(14), Duration::from_millis(1500)),
        |group| {
            let old = signal_master(group, "-STOP");
            let thawed = std::time::Instant::now() + Duration::from_secs(5);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while group.promoted(old).is_none() {
                assert!(std::time::Instant::now() < deadline, "no promotion");
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(thawed.saturating_duration_since(std::time::Instant::now()));
            let status = std::process::Command::new("kill")
                .args(["-CONT", &group.server(old).pid().to_string()])
                .status()
                .expect("run kill");
            assert!(status.success());
        },
    )
    .await;
    report("master SIGSTOP", &timeline);
    assert_no_second_holder(&timeline);
    drop(guard);
}

/// `min_replicas(0)`: no acknowledgement asked for. A planned failover promotes the replica
/// with the most data, which has the lock: kept, and never two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_failover_without_acknowledgement_keeps_the_lock() {
    let group = Arc::new(group());
    let (timeline, guard) = scenario(
        group.clone(),
        0,
        (Duration::from_secs(12), Duration::ZERO),
        |group| {
            group.failover();
        },
    )
    .await;
    report("SENTINEL FAILOVER, min_replicas 0", &timeline);
    assert_no_second_holder(&timeline);
    assert!(timeline.lost.is_none(), "kept");
    drop(guard);
}

/// `min_replicas(2)` with two replicas (every replica): after the switch the new master has
/// one replica until Sentinel converts the old master (about 10 s later), so no renewal is
/// acknowledged by two and the lock is lost at the end of its lease — and the holder is told,
/// with no second holder before that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_failover_requiring_every_replica_loses_the_lock_safely() {
    let group = Arc::new(group());
    let (timeline, guard) = scenario(
        group.clone(),
        2,
        (Duration::from_secs(10), Duration::ZERO),
        |group| {
            group.failover();
        },
    )
    .await;
    report("SENTINEL FAILOVER, min_replicas 2", &timeline);
    assert_no_second_holder(&timeline);
    let (_, error) = timeline.lost.as_ref().expect("lost within the run");
    assert!(error.contains("replica"), "told why: {error}");
    drop(guard);
}
