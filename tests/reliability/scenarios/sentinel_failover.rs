//! Scenario 16: Redis Sentinel failover in the middle of a counter race.
//!
//! A master, its replica and three sentinels (`testkit::RedisSentinel`). Workers, each with
//! its own client (`Config::sentinel`, `min_replicas = 1`), race to increment one counter under
//! one lock: read, yield, write, so only exclusion keeps it exact. The counter lives in this
//! process, with a flag that counts overlapping bodies: the lock is all that keeps them apart.
//! Mid-run, `SENTINEL FAILOVER` promotes the replica; the race goes on until the old master
//! has rejoined as the new master's replica and for a while after.
//!
//! Every worker takes turns on the one lock, and while the new master has no replica each
//! attempt holds it for the replica timeout (200 ms) before it is refused, so few attempts
//! fit in that window: the note counts them, and the slowest call.
//!
//! Invariants: no two bodies overlap; the counter equals the bodies that completed; sections
//! complete before the failover and on the new master after it. What the failover costs is
//! counted, not failed: while the new master has no replica (Sentinel turns the old master
//! into one some 10 s after the switch) every acquire is refused with `Unreplicated`, which
//! is what `min_replicas = 1` asks for.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{Config, Error};
use testkit::RedisSentinel;
use tokio::time::Instant;

use crate::common::Settings;
use crate::report::{Scenario, Tally};

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let workers = s.pick(4, 8);
    Scenario::new(
        "16",
        format!("Sentinel failover mid-race: {workers} clients, min_replicas = 1"),
        budget,
        move |t| run(t, workers),
    )
}

/// What the workers share.
#[derive(Default)]
struct Race {
    /// The protected counter (read, yield, write).
    counter: AtomicU64,
    /// Bodies running right now (more than one: an overlap).
    inside: AtomicUsize,
    overlaps: AtomicU64,
    /// Bodies that wrote their increment.
    completed: AtomicU64,
    /// After the failover settled: sections completed since.
    after_failover: AtomicU64,
    failover_settled: AtomicBool,
    ok: AtomicU64,
    unreplicated: AtomicU64,
    busy: AtomicU64,
    transient: AtomicU64,
    lost: AtomicU64,
    /// The longest `run` call, in milliseconds.
    slowest_ms: AtomicU64,
    stop: AtomicBool,
}

/// Leaves the body's section when dropped (completed or cancelled).
struct Inside<'a>(&'a Race);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn run(t: Arc<Tally>, workers: usize) {
    let group = Arc::new(
        tokio::task::spawn_blocking(RedisSentinel::start)
            .await
            .unwrap(),
    );
    let race = Arc::new(Race::default());
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let client = Config::sentinel(group.sentinel_urls(), RedisSentinel::SERVICE)
            .response_timeout(Duration::from_secs(1))
            .replica_timeout(Duration::from_millis(200))
            .min_replicas(1)
            .connect()
            .await
            .expect("connect through the sentinels");
        let race = race.clone();
        tasks.push(tokio::spawn(async move {
            while !race.stop.load(Ordering::Acquire) {
                let body = {
                    let race = race.clone();
                    async move {
                        if race.inside.fetch_add(1, Ordering::AcqRel) > 0 {
                            race.overlaps.fetch_add(1, Ordering::AcqRel);
                        }
                        let _inside = Inside(&race);
                        let n = race.counter.load(Ordering::Acquire);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        race.counter.store(n + 1, Ordering::Release);
                        race.completed.fetch_add(1, Ordering::AcqRel);
                    }
                };
                let started = Instant::now();
                let result = client
                    .lock("counter")
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(1))
                    .run(body)
                    .await;
                let took = started.elapsed().as_millis() as u64;
                race.slowest_ms.fetch_max(took, Ordering::AcqRel);
                let count = match &result {
                    Ok(()) => {
                        if race.failover_settled.load(Ordering::Acquire) {
                            race.after_failover.fetch_add(1, Ordering::AcqRel);
                        }
                        &race.ok
                    }
                    Err(Error::Unreplicated { .. }) => &race.unreplicated,
                    Err(e) if e.is_busy() => &race.busy,
                    Err(e) if e.is_lost() => &race.lost,
                    Err(_) => &race.transient,
                };
                count.fetch_add(1, Ordering::AcqRel);
                if result.is_err() {
                    // Refused or failed: not a hot loop against a failing server.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = race.ok.load(Ordering::Acquire);
    let switch_started = Instant::now();
    let new_master = {
        let group = group.clone();
        tokio::task::spawn_blocking(move || group.failover())
            .await
            .unwrap()
    };
    let settled_after = switch_started.elapsed();
    race.failover_settled.store(true, Ordering::Release);
    t.faults(1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    race.stop.store(true, Ordering::Release);
    for task in tasks {
        task.await.expect("worker");
    }

    let load = |n: &AtomicU64| n.load(Ordering::Acquire);
    let (ok, completed, counter) = (load(&race.ok), load(&race.completed), load(&race.counter));
    t.ops(
        ok + load(&race.unreplicated) + load(&race.busy) + load(&race.transient) + load(&race.lost),
    );
    t.check(load(&race.overlaps) == 0, || {
        format!("{} bodies overlapped another", load(&race.overlaps))
    });
    t.check(counter == completed, || {
        format!("counter {counter} != {completed} completed increments (a lost update)")
    });
    t.check(before > 0, || {
        "no section completed before the failover".into()
    });
    t.check(load(&race.after_failover) > 0, || {
        format!("no section completed on the new master ({new_master}) after the failover")
    });
    t.note(format!(
        "{ok} Ok sections ({before} before the failover, {} after it settled in {:.1} s); refused during it: {} Unreplicated, {} transient errors; {} busy, {} lost; counter {counter}; slowest call {} ms",
        load(&race.after_failover),
        settled_after.as_secs_f64(),
        load(&race.unreplicated),
        load(&race.transient),
        load(&race.busy),
        load(&race.lost),
        load(&race.slowest_ms),
    ));
}
