//! Redis Cluster (`Config::cluster`) against a real 3-master + 3-replica cluster made by the
//! test support (`redis-server --cluster-enabled yes` ×6, `redis-cli --cluster create`):
//! mutual exclusion on every master, waiters woken through sharded pub/sub on several shards,
//! renewal of hundreds of locks spread over the slots, and a renewed lock that survives
//! `CLUSTER FAILOVER` of its master with no second holder.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{hash_slot, Client, Config};
use redis::AsyncCommands;
use testkit::RedisCluster;

async fn client(cluster: &RedisCluster) -> Client {
    Config::cluster(cluster.urls())
        .response_timeout(Duration::from_secs(3))
        .replica_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect to the cluster")
}

/// Assertions' own connection to the cluster.
async fn raw(cluster: &RedisCluster) -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

/// One lock name per master (`prefix:<n>`, the first n whose slot that master serves).
fn one_name_per_master(cluster: &RedisCluster, prefix: &str) -> Vec<(String, u16)> {
    let mut names = Vec::new();
    for master in cluster.master_ports() {
        let name = (0..)
            .map(|n| format!("{prefix}:{n}"))
            .find(|name| cluster.master_of_slot(hash_slot(name.as_bytes())) == master)
            .unwrap();
        names.push((name, master));
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_race_is_exact_on_every_master() {
    let cluster = RedisCluster::start(3, 1);
    let names: Vec<String> = one_name_per_master(&cluster, "counter")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names.len(), 3);
    let clients = [client(&cluster).await, client(&cluster).await];
    const TASKS_PER_CLIENT: usize = 4;
    const ROUNDS: usize = 10;
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..TASKS_PER_CLIENT {
            let (c, names) = (c.clone(), names.clone());
            let mut conn = raw(&cluster).await;
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    for name in &names {
                        let counter = format!("count:{{{name}}}");
                        c.lock(name.as_str())
                            .wait(Duration::from_secs(20))
                            .run(async {
                                // Read, yield, write: only exclusion keeps the count exact.
                                let n: u64 = conn.get(&counter).await.unwrap_or(0);
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                let () = conn.set(&counter, n + 1).await.unwrap();
                            })
                            .await
                            .expect("locked increment");
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = raw(&cluster).await;
    for name in &names {
        let n: u64 = conn.get(format!("count:{{{name}}}")).await.unwrap();
        assert_eq!(
            n as usize,
            clients.len() * TASKS_PER_CLIENT * ROUNDS,
            "{name}"
        );
    }
}

#[tokio::test]
async fn waiters_on_several_shards_are_woken_by_sharded_releases() {
    let cluster = RedisCluster::start(3, 1);
    let names = one_name_per_master(&cluster, "wake");
    let (holder, waiter) = (client(&cluster).await, client(&cluster).await);
    let mut guards = Vec::new();
    for (name, _) in &names {
        // A 30 s lease: only the release message can wake a waiter within the test.
        guards.push(
            holder
                .lock(name.as_str())
                .ttl(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap(),
        );
    }
    let mut waiting = Vec::new();
    for (name, _) in &names {
        let (waiter, name) = (waiter.clone(), name.clone());
        waiting.push(tokio::spawn(async move {
            let started = Instant::now();
            let guard = waiter
                .lock(name)
                .wait(Duration::from_secs(15))
                .acquire()
                .await
                .expect("woken and acquired");
            let waited = started.elapsed();
            guard.release().await.unwrap();
            waited
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(waiter.waiting_channels(), names.len());
    for guard in guards {
        guard.release().await.unwrap();
    }
    for task in waiting {
        let waited = task.await.unwrap();
        assert!(
            waited < Duration::from_secs(5),
            "woken by SPUBLISH: {waited:?}"
        );
    }
    testkit::eventually(Duration::from_secs(5), "waiters leave", || async {
        (waiter.waiting_channels() == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn hundreds_of_renewed_locks_across_slots_stay_held() {
    let cluster = RedisCluster::start(3, 1);
    let c = client(&cluster).await;
    const LOCKS: usize = 300;
    let mut guards = Vec::new();
    for n in 0..LOCKS {
        guards.push(
            // 2 s: a renewal every third of it. A lease lapses behind a stall of the whole
            // machine longer than two thirds of it (the client is told: `Expired`); on a loaded
            // 2-core CI machine 600 ms and 1 s leases each lapsed once, 1.3 s margin here.
            c.lock(format!("renew:{n}"))
                .ttl(Duration::from_secs(2))
                .renew(true)
                .acquire()
                .await
                .unwrap(),
        );
    }
    let slots: std::collections::HashSet<u16> = (0..LOCKS)
        .map(|n| hash_slot(format!("renew:{n}").as_bytes()))
        .collect();
    assert!(slots.len() > 250, "spread over many slots: {}", slots.len());
    assert_eq!(c.renewing(), LOCKS);
    // Two and a half ttls: every lease renewed about seven times, on every master.
    tokio::time::sleep(Duration::from_millis(5000)).await;
    for guard in &guards {
        guard.ensure_held().expect("renewed across slots");
    }
    let other = client(&cluster).await;
    assert!(other.lock("renew:7").acquire().await.unwrap_err().is_busy());
    for guard in guards {
        guard.release().await.expect("released while held");
    }
    assert_eq!(c.renewing(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lock_survives_a_failover_of_its_master_with_no_second_holder() {
    let cluster = Arc::new(RedisCluster::start(3, 1));
    let (name, master) = one_name_per_master(&cluster, "failover").remove(0);
    let holder = client(&cluster).await;
    // A replica just through its first sync may not acknowledge at once (seen on Valkey 8.1):
    // asked again until it does, within 5 s.
    let guard = testkit::eventually(Duration::from_secs(5), "the replica acknowledges", || {
        let lock = holder
            .lock(name.as_str())
            .ttl(Duration::from_secs(2))
            .renew(true)
            .min_replicas(1);
        async move {
            match lock.acquire().await {
                Ok(guard) => Some(guard),
                Err(distlock::Error::Unreplicated { .. }) => None,
                Err(error) => panic!("taken and acknowledged (WAIT on the lock's shard): {error}"),
            }
        }
    })
    .await;
    // A contender that keeps trying throughout: it must never get the lock while it is held.
    let contender = client(&cluster).await;
    let stolen = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicUsize::new(0));
    let attempts = {
        let (stolen, stop, name) = (stolen.clone(), stop.clone(), name.clone());
        tokio::spawn(async move {
            let mut attempts = 0;
            while stop.load(Ordering::Acquire) == 0 {
                attempts += 1;
                if let Ok(g) = contender.lock(name.as_str()).acquire().await {
                    stolen.fetch_add(1, Ordering::AcqRel);
                    drop(g);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            attempts
        })
    };
    let replica = cluster.replica_of(master);
    let failover = cluster.clone();
    tokio::task::spawn_blocking(move || failover.failover(replica))
        .await
        .unwrap();
    assert_eq!(cluster.master_of_slot(hash_slot(name.as_bytes())), replica);
    // Two ttls (six renewals) on the new master: renewals follow MOVED there.
    tokio::time::sleep(Duration::from_secs(4)).await;
    guard
        .ensure_held()
        .expect("the lease survived the failover");
    stop.store(1, Ordering::Release);
    let attempts = attempts.await.unwrap();
    assert!(attempts > 20, "the contender kept trying: {attempts}");
    assert_eq!(stolen.load(Ordering::Acquire), 0, "no second holder");
    guard.release().await.expect("released on the new master");
    let mut conn = raw(&cluster).await;
    let exists: bool = conn.exists(format!("distlock:{{{name}}}")).await.unwrap();
    assert!(!exists);
}
