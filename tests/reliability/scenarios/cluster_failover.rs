//! Scenario c1: a Redis Cluster (3 masters, 1 replica each) fails over every master in turn
//! (`CLUSTER FAILOVER` on its replica, one after the other) while worker tasks of two clients
//! race read-yield-write counters under locks spread over all masters.
//!
//! Invariants: no two bodies of one lock overlap (an in-process flag per lock, set on entry),
//! and each Redis counter ends exactly at the number of increments applied (a write whose reply
//! was lost in a switch is read back while the lock is still held; one whose read-back fails
//! too is counted as unknown and widens the bound, and the note shows how many there were).
//! Acquires that fail while a master switches (timeouts, connection errors) are retried and
//! counted in the note; they are not violations.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{hash_slot, Client, Config};
use redis::AsyncCommands;
use testkit::RedisCluster;
use tokio::time::Instant;

use crate::common::Settings;
use crate::report::{Scenario, Tally};

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let tasks = s.pick(4, 8);
    Scenario::new(
        "c1",
        format!("Redis Cluster: CLUSTER FAILOVER of each master under {tasks}x2 racing tasks"),
        budget,
        move |t| run(t, tasks),
    )
}

/// One lock name per master, and its counter key (same slot).
struct Target {
    name: String,
    counter: String,
    /// Set while a body of this lock runs in this process.
    inside: AtomicBool,
    /// Increments whose write was answered / failed with an unknown outcome.
    written: AtomicU64,
    unknown: AtomicU64,
}

async fn cluster_client(cluster: &RedisCluster) -> Client {
    Config::cluster(cluster.urls())
        .response_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect to the cluster")
}

async fn run(t: Arc<Tally>, tasks: u64) {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start(3, 1))
            .await
            .expect("start"),
    );
    let targets: Arc<Vec<Target>> = Arc::new(
        cluster
            .master_ports()
            .into_iter()
            .map(|master| {
                let name = (0..)
                    .map(|n| format!("cf:{n}"))
                    .find(|name| cluster.master_of_slot(hash_slot(name.as_bytes())) == master)
                    .expect("a name on every master");
                Target {
                    counter: format!("cf-count:{{{name}}}"),
                    name,
                    inside: AtomicBool::new(false),
                    written: AtomicU64::new(0),
                    unknown: AtomicU64::new(0),
                }
            })
            .collect(),
    );
    let clients = [
        cluster_client(&cluster).await,
        cluster_client(&cluster).await,
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let failed_acquires = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for client in &clients {
        for task in 0..tasks {
            let (client, targets, stop, t) =
                (client.clone(), targets.clone(), stop.clone(), t.clone());
            let failed = failed_acquires.clone();
            let data = redis::cluster::ClusterClient::new(cluster.urls()).expect("client");
            workers.push(tokio::spawn(async move {
                let mut conn = data.get_async_connection().await.expect("data connection");
                let mut round = task as usize;
                while !stop.load(Ordering::Acquire) {
                    let target = &targets[round % targets.len()];
                    round += 1;
                    let guard = match client
                        .lock(target.name.as_str())
                        // Short: a release lost in a switch costs at most this.
                        .ttl(Duration::from_secs(2))
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await
                    {
                        Ok(guard) => guard,
                        Err(_) => {
                            // A master switching: try again.
                            failed.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    };
                    t.ops(1);
                    t.check(!target.inside.swap(true, Ordering::AcqRel), || {
                        format!("two bodies of {} overlapped", target.name)
                    });
                    let read: Result<Option<u64>, _> = conn.get(&target.counter).await;
                    if let Ok(n) = read {
                        tokio::task::yield_now().await;
                        let next = n.unwrap_or(0) + 1;
                        let write: Result<(), _> = conn.set(&target.counter, next).await;
                        // A write whose reply was lost: still under the lock, read it back
                        // (nobody else writes this counter while we hold it).
                        let applied = match write {
                            Ok(()) => Some(true),
                            Err(_) => match conn.get::<_, Option<u64>>(&target.counter).await {
                                Ok(now) if now == Some(next) => Some(true),
                                Ok(now) if now == n => Some(false),
                                Ok(now) => {
                                    t.violation(format!(
                                        "counter of {} changed under its lock: {n:?} -> {now:?}",
                                        target.name
                                    ));
                                    Some(false)
                                }
                                Err(_) => None,
                            },
                        };
                        match applied {
                            Some(true) => drop(target.written.fetch_add(1, Ordering::Relaxed)),
                            Some(false) => {}
                            None => drop(target.unknown.fetch_add(1, Ordering::Relaxed)),
                        }
                    }
                    target.inside.store(false, Ordering::Release);
                    // Released while the body's effects are known; a failed release leaves the
                    // lock to its ttl (the next acquire waits for it).
                    let _ = guard.release().await;
                }
            }));
        }
    }

    // Let the race run, then fail over every master in turn, then let it run again.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let started = Instant::now();
    for master in cluster.master_ports() {
        let (cluster, replica) = (cluster.clone(), cluster.replica_of(master));
        tokio::task::spawn_blocking(move || cluster.failover(replica))
            .await
            .expect("failover");
        t.faults(1);
    }
    let switching = started.elapsed();
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::Release);
    for worker in workers {
        worker.await.expect("worker task");
    }

    let mut conn = redis::cluster::ClusterClient::new(cluster.urls())
        .expect("client")
        .get_async_connection()
        .await
        .expect("connection");
    let (mut written, mut unknown) = (0, 0);
    for target in targets.iter() {
        let count: u64 = conn
            .get(&target.counter)
            .await
            .map(|n: Option<u64>| n.unwrap_or(0))
            .expect("GET");
        let (w, u) = (
            target.written.load(Ordering::Relaxed),
            target.unknown.load(Ordering::Relaxed),
        );
        written += w;
        unknown += u;
        t.check(count >= w && count <= w + u, || {
            format!(
                "counter of {} is {count}, {w} increments answered, {u} unknown: an increment was lost or doubled",
                target.name
            )
        });
    }
    t.check(written > 0, || "no increment ran".to_owned());
    t.note(format!(
        "{written} increments (+{unknown} unanswered), 3 failovers in {} ms, {} acquires failed while switching",
        switching.as_millis(),
        failed_acquires.load(Ordering::Relaxed)
    ));
    drop(clients);
}
