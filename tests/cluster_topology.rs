//! Redis Cluster topology changes under held locks (`Config::cluster`), against real clusters
//! made by the test support: a lock's slot migrated to another master while the lock is held
//! and renewed (no second holder, renewals and release follow the slot, waiters are woken on
//! the new shard), and a master killed with `SIGKILL` and replaced by its replica (a lock taken
//! with `min_replicas(1)` is still held there, a waiter subscribed on the dead master is woken
//! by the release on the promoted one, and a renewed lock is reported lost as `Unreplicated`
//! because the promoted master has no replica to acknowledge its renewals); and a waiter whose
//! shard fails over (`CLUSTER FAILOVER`) is woken by the release on the new master.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{hash_slot, Client, Config, LossReason};
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

/// A direct connection to one node (not routed by slot).
/// A task of a client of its own waiting (up to `wait`) for `name`, returned once it is
/// subscribed to the lock's release channel.
async fn subscribed_waiter(
    cluster: &RedisCluster,
    name: &str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<distlock::LockGuard, distlock::Error>> {
    let waiter = client(cluster).await;
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.to_owned());
        tokio::spawn(async move { waiter.lock(name).wait(wait).acquire().await })
    };
    testkit::eventually(Duration::from_secs(5), "the waiter subscribed", || async {
        (waiter.waiting_channels() == 1).then_some(())
    })
    .await;
    waiting
}

async fn node_conn(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A name whose slot is `slot` (`prefix:<n>`, the first such n).
fn name_in_slot(prefix: &str, slot: u16) -> String {
    (0..)
        .map(|n| format!("{prefix}:{n}"))
        .find(|name| hash_slot(name.as_bytes()) == slot)
        .unwrap()
}

/// A contender that tries to take `name` every 20 ms until stopped; it counts its attempts
/// and every success (a second holder).
struct Contender {
    stop: Arc<AtomicBool>,
    stolen: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<usize>,
}

impl Contender {
    fn start(client: Client, name: String) -> Contender {
        let stop = Arc::new(AtomicBool::new(false));
        let stolen = Arc::new(AtomicUsize::new(0));
        let task = {
            let (stop, stolen) = (stop.clone(), Arc::clone(&stolen));
            tokio::spawn(async move {
                let mut attempts = 0;
                while !stop.load(Ordering::Acquire) {
                    attempts += 1;
                    if let Ok(guard) = client.lock(name.as_str()).acquire().await {
                        stolen.fetch_add(1, Ordering::AcqRel);
                        drop(guard);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                attempts
            })
        };
        Contender { stop, stolen, task }
    }

    /// Stops it; (attempts, successes).
    async fn stop(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Release);
        let attempts = self.task.await.unwrap();
        (attempts, self.stolen.load(Ordering::Acquire))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lock_survives_a_migration_of_its_slot_and_waiters_follow_it() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let name = "migrating:0".to_owned();
    let slot = hash_slot(name.as_bytes());
    // A second lock in the same slot, held long (30 s, not renewed), for a waiter: only the
    // release message on the slot's new shard can wake it within the test.
    let long = name_in_slot("migrating-long", slot);
    let from = cluster.master_of_slot(slot);
    let to = *cluster.master_ports().iter().find(|&&p| p != from).unwrap();

    let holder = client(&cluster).await;
    let guard = holder
        .lock(name.as_str())
        .ttl(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    let long_guard = holder
        .lock(long.as_str())
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiting = subscribed_waiter(&cluster, &long, Duration::from_secs(20)).await;
    let contender = Contender::start(client(&cluster).await, name.clone());

    let migrating = cluster.clone();
    // One key at a time, 400 ms apart: renewals and the contender's attempts meet the slot
    // half-moved (`ASK` for the keys already on the new owner) for about a second.
    tokio::task::spawn_blocking(move || {
        migrating.migrate_slot_paced(slot, to, Duration::from_millis(400))
    })
    .await
    .unwrap();
    assert_eq!(cluster.master_of_slot(slot), to);
    let lease_key = format!("distlock:{{{name}}}");
    let mut target = node_conn(to).await;
    let on_target: bool = target.exists(&lease_key).await.unwrap();
    assert!(on_target, "the lease moved with its slot");
    let asked = testkit::command_calls(&mut target, "asking").await;
    assert!(
        asked > 0,
        "clients followed ASK while the slot was half-moved"
    );

    // Four ttls after the move: every renewal since went to the new owner.
    tokio::time::sleep(Duration::from_millis(2400)).await;
    assert_eq!(guard.lost_reason(), None, "renewals followed the slot");
    guard.ensure_held().expect("held across the migration");
    let pttl: i64 = target.pttl(&lease_key).await.unwrap();
    assert!(pttl > 0, "renewed on the new owner: pttl {pttl}");

    let (attempts, stolen) = contender.stop().await;
    assert!(attempts > 20, "the contender kept trying: {attempts}");
    assert_eq!(stolen, 0, "no second holder during the migration");

    // The waiter's sharded subscription moved to the new shard.
    let channel = format!("distlock:{{{long}}}:released");
    testkit::eventually(
        Duration::from_secs(5),
        "subscribed on the new shard",
        || {
            let (channel, mut target) = (channel.clone(), target.clone());
            async move {
                let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(&channel)
                    .query_async(&mut target)
                    .await
                    .unwrap();
                (counts.first().map(|(_, n)| *n) == Some(1)).then_some(())
            }
        },
    )
    .await;
    let released_at = Instant::now();
    long_guard
        .release()
        .await
        .expect("release on the new owner");
    let woken = waiting.await.unwrap().expect("the waiter gets the lock");
    let waited = released_at.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "woken by the release message on the new shard, not the 30 s lease: {waited:?}"
    );
    woken.release().await.unwrap();

    guard.release().await.expect("released on the new owner");
    let exists: bool = target.exists(&lease_key).await.unwrap();
    assert!(!exists, "the release deleted the lease on the new owner");
}

/// A lock taken with `min_replicas(1)` was on the replica before the caller got it, so a
/// replica promoted after its master is killed (`SIGKILL`, then `CLUSTER FAILOVER TAKEOVER`)
/// still has it: nobody else can take it within its lease, and the holder's release works on
/// the new master. (A lock taken without `min_replicas` may be lost in such a failover: the
/// master may die before its replica got the write. That is not asserted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_acknowledged_by_a_replica_survives_sigkill_of_its_master() {
    let mut cluster = RedisCluster::start(3, 1);
    let name = "killed:0".to_owned();
    let slot = hash_slot(name.as_bytes());
    let master = cluster.master_of_slot(slot);
    let replica = cluster.replica_of(master);
    let holder = client(&cluster).await;
    let ttl = Duration::from_secs(6);
    let guard = holder
        .lock(name.as_str())
        .ttl(ttl)
        .min_replicas(1)
        .acquire()
        .await
        .expect("taken and acknowledged by the replica");
    let deadline = guard.guaranteed_until();
    // A renewed lock with `min_replicas(1)` on the same master: once that master is gone, its
    // promoted replica has no replica to acknowledge renewals, so the holder must be told.
    let renewed = holder
        .lock(name_in_slot("killed-renewed", slot))
        .ttl(Duration::from_secs(3))
        .renew(true)
        .min_replicas(1)
        .acquire()
        .await
        .expect("taken and acknowledged");
    // A lock held long (30 s) in the same slot, and a waiter for it, subscribed on the master
    // that is about to die: after the takeover only the release message on the promoted
    // replica can wake it within the test.
    let long = name_in_slot("killed-long", slot);
    let long_guard = holder
        .lock(long.as_str())
        .ttl(Duration::from_secs(30))
        .min_replicas(1)
        .acquire()
        .await
        .expect("taken and acknowledged");
    let waiting = subscribed_waiter(&cluster, &long, Duration::from_secs(25)).await;
    let contender = Contender::start(client(&cluster).await, name.clone());

    cluster.kill_node(master);
    let promoted = Instant::now();
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.takeover(replica);
        cluster
    })
    .await
    .unwrap();
    assert_eq!(cluster.master_of_slot(slot), replica);
    let mut new_master = node_conn(replica).await;
    let kept: bool = new_master
        .exists(format!("distlock:{{{name}}}"))
        .await
        .unwrap();
    assert!(kept, "the promoted replica has the lease");

    // Contend until shortly before the lease's guaranteed end.
    tokio::time::sleep_until(deadline - Duration::from_millis(300)).await;
    let (attempts, stolen) = contender.stop().await;
    assert!(
        attempts > 20,
        "the contender kept trying after the takeover ({:?} ago): {attempts}",
        promoted.elapsed()
    );
    assert_eq!(stolen, 0, "no second holder within the lease");
    guard.ensure_held().expect("still within the lease");
    guard
        .release()
        .await
        .expect("released on the promoted replica");
    let exists: bool = new_master
        .exists(format!("distlock:{{{name}}}"))
        .await
        .unwrap();
    assert!(!exists);

    let released_at = Instant::now();
    long_guard
        .release()
        .await
        .expect("released on the promoted replica");
    let woken = waiting.await.unwrap().expect("the waiter gets the lock");
    let waited = released_at.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "woken by the release on the promoted replica, not the 30 s lease: {waited:?}"
    );
    woken.release().await.unwrap();

    let reason = tokio::time::timeout(Duration::from_secs(10), renewed.lost())
        .await
        .expect("the holder of the renewed lock is told it lost it");
    assert_eq!(reason, LossReason::Unreplicated, "{reason}");
    // The cluster (the killed node stays down) is stopped by PID when dropped.
}

/// A waiter subscribed on a shard whose master fails over (`CLUSTER FAILOVER`: the old master
/// becomes a replica and drops its sharded subscribers) is subscribed again on the new master
/// and woken by the release there, long before the holder's 30 s lease. (The old master, now a
/// replica, would accept the subscription again, but Redis 7.0 does not deliver `SPUBLISH` of
/// its new master to it: without routing by a fresh slot map the waiter slept until its wait
/// ran out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_a_failover_of_its_shard() {
    let cluster = Arc::new(RedisCluster::start(3, 1));
    let name = "failover-wait:0".to_owned();
    let master = cluster.master_of_slot(hash_slot(name.as_bytes()));
    let replica = cluster.replica_of(master);
    let holder = client(&cluster).await;
    let guard = holder
        .lock(name.as_str())
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiting = subscribed_waiter(&cluster, &name, Duration::from_secs(20)).await;
    let failover = cluster.clone();
    tokio::task::spawn_blocking(move || failover.failover(replica))
        .await
        .unwrap();
    let channel = format!("distlock:{{{name}}}:released");
    let new_master = node_conn(replica).await;
    testkit::eventually(
        Duration::from_secs(5),
        "subscribed on the new master",
        || {
            let (channel, mut conn) = (channel.clone(), new_master.clone());
            async move {
                let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                    .arg("SHARDNUMSUB")
                    .arg(&channel)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                (counts.first().map(|(_, n)| *n) == Some(1)).then_some(())
            }
        },
    )
    .await;
    assert!(!waiting.is_finished(), "the lock is still held");
    let released_at = Instant::now();
    guard.release().await.expect("released on the new master");
    let woken = waiting.await.unwrap().expect("the waiter gets the lock");
    let waited = released_at.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "woken by the release on the new master, not the 30 s lease: {waited:?}"
    );
    woken.release().await.unwrap();
}
