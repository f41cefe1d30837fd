//! Every permit waiter in its turn (issue 28, item 3), against real servers: a semaphore's
//! waiters queue in Redis as a lock's do, and a release hands the permit it frees to the first
//! of them (trusted for its grant window as a lock's; a fenced waiter confirms it with one more
//! attempt, which raises its token), so waiters
//! of every client take their turns in the order they came, never more than `n` inside at
//! once; a waiter that went away costs the semaphore its grant window at most, never its ttl;
//! one cancelled after a permit was handed to it hands the permit on; on one server, through
//! Sentinel (the lock's waiters too) and through a cluster's shard.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{hash_slot, Client, Config, Error, LockGuard};
use testkit::{
    fairness_run, queued, quick_client as client, until_queued, Fairness, FairnessRun, Hold,
    LoneSentinel, RedisCluster, RedisSentinel, RedisServer,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Waits up to 20 s for one of `permits` permits of `name`, with a lease of `secs`.
async fn permit(c: &Client, name: &str, permits: u32, secs: u64) -> Result<LockGuard, Error> {
    c.semaphore(name, permits)
        .ttl(Duration::from_secs(secs))
        .wait(Duration::from_secs(20))
        .acquire()
        .await
}

/// A task that waits for the one permit of `name` (fenced: its token), then notes when it
/// took it, runs `inside` with its token, and releases it: resolves to when it took it.
fn waiter(
    c: Client,
    name: &'static str,
    inside: impl FnOnce(Option<u64>) + Send + 'static,
) -> JoinHandle<Instant> {
    tokio::spawn(async move {
        let g = c
            .semaphore(name, 1)
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(20))
            .fenced(true)
            .acquire()
            .await
            .unwrap();
        let at = Instant::now();
        inside(g.token());
        g.release().await.unwrap();
        at
    })
}

/// A 4 s contention run over `clients` for one of `permits` permits (holds of 2-10 ms): never
/// more than `permits` inside, no acquire without its permit, Jain's index at least 0.99.
async fn fair_and_bounded(clients: &[Client], name: &str, permits: u32) -> Fairness {
    let run = FairnessRun {
        duration: Duration::from_secs(4),
        wait: Duration::from_secs(3),
        ttl: Duration::from_secs(5),
        hold_ms: (2, 10),
        hold: Hold::Permits(permits),
    };
    let figures = fairness_run(clients, name, run).await;
    figures.assert_in_turn(0.99);
    figures
}

async fn clients(server: &RedisServer, n: usize) -> Vec<Client> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(client(server).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_clients_take_a_permit_of_one_in_turn() {
    let server = RedisServer::start();
    let figures = fair_and_bounded(&clients(&server, 4).await, "permit-fair", 1).await;
    assert!(figures.longest_streak <= 2, "{}", figures.summary());
}

/// Through Sentinel (the master it names), permit waiters and lock waiters alike take their
/// turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_permit_and_lock_waiters_take_their_turns() {
    let master = RedisServer::start();
    let sentinel = LoneSentinel::start(&master, None);
    let mut all = Vec::new();
    for _ in 0..4 {
        let config = Config::sentinel([sentinel.url()], RedisSentinel::SERVICE);
        all.push(config.connect().await.unwrap());
    }
    fair_and_bounded(&all, "sentinel-permit-fair", 1).await;
    let run = FairnessRun {
        duration: Duration::from_secs(3),
        hold_ms: (2, 10),
        ..FairnessRun::default()
    };
    fairness_run(&all, "sentinel-lock-fair", run)
        .await
        .assert_in_turn(0.99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_two_hands_each_freed_permit_in_turn() {
    let server = RedisServer::start();
    fair_and_bounded(&clients(&server, 6).await, "permits-fair", 2).await;
}

/// Three waiters of three clients queue behind a holder with a 30 s lease: each release hands
/// the permit to the next in arrival order at once (nothing else could free it this soon),
/// and each fenced holder's token is above the one before.
async fn handed_in_arrival_order(
    clients: Vec<Client>,
    conn: &redis::aio::MultiplexedConnection,
    name: &'static str,
) {
    let mut clients = clients.into_iter();
    let holder = permit(&clients.next().unwrap(), name, 1, 30).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let order = order.clone();
        let push = move |token: Option<u64>| order.lock().unwrap().push((i, token));
        waiters.push(waiter(clients.next().unwrap(), name, push));
        until_queued(conn, name, i + 1).await;
    }
    let released = Instant::now();
    holder.release().await.unwrap();
    let mut last = released;
    for w in waiters {
        last = last.max(w.await.unwrap());
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, [0, 1, 2], "handed in arrival order");
    let tokens: Vec<u64> = order
        .iter()
        .map(|(_, t)| t.expect("a fenced permit's token"))
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens rise: {tokens:?}"
    );
    let took = last - released;
    assert!(
        took < Duration::from_secs(1),
        "three handoffs took {took:?}"
    );
    assert_eq!(queued(conn, name).await, 0, "nobody left in the queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_waiters_are_handed_the_permit_in_arrival_order() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    handed_in_arrival_order(clients(&server, 4).await, &conn, "permit-fifo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_hands_a_permit_over_through_the_shard_in_arrival_order() {
    let cluster = RedisCluster::start(3, 0);
    let name = "permit-shard-fifo";
    let node = cluster.master_of_slot(hash_slot(format!("distlock:{{{name}}}").as_bytes()));
    let conn = cluster.node(node).conn().await;
    let mut all = Vec::new();
    for _ in 0..4 {
        all.push(Config::cluster(cluster.urls()).connect().await.unwrap());
    }
    handed_in_arrival_order(all, &conn, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_waiter_that_went_away_costs_its_window_not_the_ttl() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let conn = server.conn().await;
    let holder = permit(&a, "permit-gone", 1, 30).await.unwrap();
    // A waiter of a process that died: an entry ahead of everyone (ticket 1, 1 s window).
    let mut c = conn.clone();
    let _: () = redis::cmd("ZADD")
        .arg("distlock:{permit-gone}:queue")
        .arg(1024 + 1000)
        .arg("d2:dead-waiter")
        .query_async(&mut c)
        .await
        .unwrap();
    let started = Instant::now();
    let live = tokio::spawn(async move {
        let g = permit(&b, "permit-gone", 1, 30).await.unwrap();
        let at = Instant::now();
        g.release().await.unwrap();
        at
    });
    until_queued(&conn, "permit-gone", 2).await;
    holder.release().await.unwrap();
    // Handed to the dead waiter for its 1 s window at most.
    let deadline: Option<f64> = redis::cmd("ZSCORE")
        .arg("distlock:{permit-gone}")
        .arg("d2:dead-waiter")
        .query_async(&mut c)
        .await
        .unwrap();
    let time: (String, String) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
    let now_ms = time.0.parse::<f64>().unwrap() * 1000.0 + time.1.parse::<f64>().unwrap() / 1000.0;
    let left = deadline.expect("the dead waiter was handed the permit") - now_ms;
    assert!(left <= 1000.0, "handed for the window, {left} ms left");
    let took = live.await.unwrap() - started;
    assert!(
        took < Duration::from_secs(4),
        "the live waiter took the permit {took:?} after the release (window 1 s + its recheck 1 s), not the 30 s ttl"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_permit_waiter_hands_on_a_permit_handed_to_it() {
    let server = RedisServer::start();
    let all = clients(&server, 3).await;
    let conn = server.conn().await;
    let holder = permit(&all[0], "permit-cx", 1, 30).await.unwrap();
    let first = tokio::spawn({
        let b = all[1].clone();
        async move { permit(&b, "permit-cx", 1, 30).await }
    });
    until_queued(&conn, "permit-cx", 1).await;
    let second = waiter(all[2].clone(), "permit-cx", |_| {});
    until_queued(&conn, "permit-cx", 2).await;
    // The first waiter goes away; the release that follows finds the second first in line (or
    // hands the permit to the first, whose departure hands it on).
    first.abort();
    let _ = first.await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let took = second.await.unwrap() - released;
    assert!(
        took < Duration::from_millis(500),
        "handed on at once: {took:?}"
    );
    all[1].settle().await;
    until_queued(&conn, "permit-cx", 0).await;
}
