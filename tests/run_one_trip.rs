//! `run` costs its caller one round trip (issue 21, item 1): once the body completed inside its
//! lease, the release is sent (queued on the command connection or in the group commit) and
//! `run` returns without waiting for its answer. The release goes out before anything the
//! client sends next, so the same client taking the lock again right after `run` returns finds
//! it free: never `Busy`, in a tight loop, on one server and on a Redis Cluster; and a client
//! dropped right after `run` still frees the lock at once.

use std::time::Duration;

use distlock::{Client, Config, Error};
use redis::AsyncCommands;
use testkit::{at_rest, RedisCluster, RedisServer};
use tokio::time::Instant;

/// Rounds of each loop: enough for a release overtaken by the next acquire to show up.
const ROUNDS: usize = 2_000;

/// `run` then, at once, `run` again and a bare `acquire` (no `wait`: a lock still held is
/// `Busy`), `ROUNDS` times, on each of `names`.
async fn reacquire_loop(client: &Client, names: &[String]) {
    for round in 0..ROUNDS {
        for name in names {
            let out = client
                .lock(name.as_str())
                .ttl(Duration::from_secs(10))
                .run(async { round })
                .await;
            assert_eq!(out.expect("the lock is free: run takes it"), round);
            // The same client, next: the release sent by `run` must already be ahead of it.
            let again = client
                .lock(name.as_str())
                .ttl(Duration::from_secs(10))
                .run(async {})
                .await;
            match again {
                Ok(()) => {}
                Err(Error::Busy { .. }) => {
                    panic!("round {round}: run's release was overtaken by the next run of {name}")
                }
                Err(error) => panic!("round {round}: {error}"),
            }
            let guard = match client.lock(name.as_str()).acquire().await {
                Ok(guard) => guard,
                Err(Error::Busy { .. }) => {
                    panic!("round {round}: run's release was overtaken by an acquire of {name}")
                }
                Err(error) => panic!("round {round}: {error}"),
            };
            guard.release().await.expect("released");
        }
    }
}

#[tokio::test]
async fn the_same_client_takes_the_lock_again_right_after_run_returns() {
    let server = RedisServer::start();
    let client = testkit::client_with(server.url(), Duration::from_secs(2)).await;
    reacquire_loop(&client, &["again".to_owned()]).await;
    at_rest(&[&client], Duration::from_secs(5)).await;
    let mut conn = server.conn().await;
    let held: bool = conn.exists("distlock:{again}").await.unwrap();
    assert!(!held, "every release reached Redis");
}

/// The same on a multi-threaded runtime, several tasks of one client each on its own lock
/// (the group commit then carries the releases and acquires together).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_client_take_their_locks_again_right_after_run_returns() {
    let server = RedisServer::start();
    let client = testkit::client_with(server.url(), Duration::from_secs(2)).await;
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let client = client.clone();
            tokio::spawn(async move { reacquire_loop(&client, &[format!("task:{task}")]).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("no task failed");
    }
    at_rest(&[&client], Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_too() {
    let cluster = RedisCluster::start(3, 0);
    let client = Config::cluster(cluster.urls())
        .response_timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("connect to the cluster");
    // Names on several masters.
    let names: Vec<String> = (0..3).map(|n| format!("again:{n}")).collect();
    reacquire_loop(&client, &names).await;
    at_rest(&[&client], Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_client_dropped_right_after_run_still_frees_the_lock() {
    let server = RedisServer::start();
    let other = testkit::client_with(server.url(), Duration::from_secs(2)).await;
    for round in 0..20 {
        let client = testkit::client_with(server.url(), Duration::from_secs(2)).await;
        client
            .lock("dropped")
            .ttl(Duration::from_secs(30))
            .run(async {})
            .await
            .expect("Ok");
        drop(client);
        // Free long before its 30 s ttl: the release was sent before `run` returned.
        let started = Instant::now();
        let guard = other
            .lock("dropped")
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "round {round}: the lock waited {:?}",
            started.elapsed()
        );
        guard.release().await.unwrap();
    }
}

/// `min_hold`: the release `run` sends keeps the key for the rest of the minimum hold.
#[tokio::test]
async fn the_release_sent_by_run_keeps_min_hold() {
    let server = RedisServer::start();
    let client = testkit::client_with(server.url(), Duration::from_secs(2)).await;
    let started = Instant::now();
    client
        .lock("kept")
        .ttl(Duration::from_secs(10))
        .min_hold(Duration::from_millis(500))
        .run(async {})
        .await
        .expect("Ok");
    match client.lock("kept").acquire().await {
        Err(Error::Busy { .. }) => {}
        other => panic!("expected Busy inside min_hold, got {other:?}"),
    }
    let guard = client
        .lock("kept")
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("free after min_hold");
    assert!(started.elapsed() >= Duration::from_millis(450));
    guard.release().await.unwrap();
}

/// `Client::settle` waits for the releases `run` sent: another connection then finds the lock
/// gone (a process about to exit calls it so its last release is not lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_waits_for_the_releases_run_sent() {
    let server = RedisServer::start();
    let client = testkit::client_with(server.url(), Duration::from_secs(2)).await;
    let mut conn = server.conn().await;
    for round in 0..200 {
        client
            .lock("settled")
            .ttl(Duration::from_secs(30))
            .run(async {})
            .await
            .expect("Ok");
        client.settle().await;
        assert_eq!(client.background_tasks(), 0);
        let held: bool = conn.exists("distlock:{settled}").await.unwrap();
        assert!(
            !held,
            "round {round}: the release was not in Redis after settle"
        );
    }
}

/// The acquires that do not go through the group commit (a semaphore's permit, a fenced
/// lock, a write after a read hold) also reach Redis after the release `run` sent just before:
/// taking the same permit (of 1), fenced lock or lock again right after `run` returns is never
/// `Busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_fenced_locks_and_writes_after_reads_too() {
    let server = RedisServer::start();
    let client = testkit::client_with(server.url(), Duration::from_secs(2)).await;
    let ttl = Duration::from_secs(10);
    for round in 0..ROUNDS {
        let steps = [
            ("a permit after a permit", client.semaphore("again:p", 1)),
            ("a permit after a permit", client.semaphore("again:p", 1)),
            (
                "a fenced lock after a fenced lock",
                client.lock("again:f").fenced(true),
            ),
            (
                "a fenced lock after a fenced lock",
                client.lock("again:f").fenced(true),
            ),
            ("a read hold", client.lock("again:rw").read()),
            ("a write after a read hold", client.lock("again:rw")),
        ];
        for (what, builder) in steps {
            match builder.ttl(ttl).run(async {}).await {
                Ok(()) => {}
                Err(Error::Busy { .. }) => {
                    panic!("round {round}: {what}: run's release was overtaken by the next acquire")
                }
                Err(error) => panic!("round {round}: {what}: {error}"),
            }
        }
    }
    at_rest(&[&client], Duration::from_secs(5)).await;
}
