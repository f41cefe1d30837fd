//! Waiters of a crashed client on every deployment (issue 48), against real servers: through
//! Sentinel, on a Redis Cluster's shard and over a RedLock quorum, a client killed as a process
//! is (its Redis user switched off and its connections killed on every server: nothing it sends
//! arrives from then on) costs a live waiter queued behind its 10 waiters one grant window in
//! all (over RedLock, where nobody is handed the lock, the waiters ahead of a caller that found
//! it free get a grace of 300 ms together); and a leader election's crashed candidates cost the
//! next live candidate one window. `tests/crashed_waiters.rs` has every kind on one server.

use std::future::Future;
use std::time::Duration;

use distlock::{hash_slot, Client, Config, LockGuard};
use testkit::{queued, LoneSentinel, RedisCluster, RedisServer};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const BOUND: Duration = Duration::from_millis(2_500);
const PASSWORD: &str = "crash-pw";

/// The crashed client's user on `servers` (all permissions); its URL on the first.
async fn add_user(servers: &[&RedisServer], user: &str) -> Vec<String> {
    let mut urls = Vec::new();
    for server in servers {
        urls.push(
            server
                .acl_user(user, PASSWORD, &["~*", "&*", "+@all"])
                .await,
        );
    }
    urls
}

/// Kills `user`'s client on `servers`: the user switched off, its connections killed.
async fn crash(servers: &[&RedisServer], user: &str) {
    for server in servers {
        let mut conn = server.conn().await;
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("off")
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(user)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

async fn lock(c: Client, name: &'static str, wait: bool) -> Result<LockGuard, distlock::Error> {
    let builder = c.lock(name).ttl(Duration::from_secs(10));
    match wait {
        true => builder.wait(Duration::from_secs(30)).acquire().await,
        false => builder.acquire().await,
    }
}

/// Waits until `n` entries are queued for `name` on `server` (up to 10 s).
async fn until_queued_on(server: &RedisServer, name: &str, n: usize) {
    let conn = server.conn().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while queued(&conn, name).await != n {
        assert!(
            Instant::now() < deadline,
            "{n} waiters not queued for {name}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The scenario: `holder` holds `name`, the crashed client's 10 waiters queue (`entries` of
/// them in Redis, counted on `queue_on`), a live waiter behind them; the crash, then the
/// release. Returns how long after the release the live waiter had the lock.
async fn behind_ten_dead<F>(
    (holder, crashed, live): (Client, Client, Client),
    (name, entries): (&'static str, usize),
    queue_on: &RedisServer,
    crash_now: F,
) -> Duration
where
    F: Future<Output = ()>,
{
    let held = lock(holder, name, false).await.unwrap();
    let doomed: Vec<JoinHandle<_>> = (0..10)
        .map(|_| tokio::spawn(lock(crashed.clone(), name, true)))
        .collect();
    until_queued_on(queue_on, name, entries).await;
    let behind: JoinHandle<Instant> = tokio::spawn(async move {
        let guard = lock(live, name, true).await.unwrap();
        let at = Instant::now();
        guard.release().await.unwrap();
        at
    });
    until_queued_on(queue_on, name, entries + 1).await;
    crash_now.await;
    for task in &doomed {
        task.abort();
    }
    let released = Instant::now();
    held.release().await.unwrap();
    let at = tokio::time::timeout(Duration::from_secs(20), behind)
        .await
        .expect("the live waiter has the lock within 20 s")
        .unwrap();
    let delay = at.saturating_duration_since(released);
    eprintln!("{name}: a live waiter behind 10 waiters of a crashed client had it {delay:?} after the release");
    delay
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel() {
    let master = RedisServer::start();
    let sentinel = LoneSentinel::start(&master, None);
    add_user(&[&master], "crashed").await;
    let config = || Config::sentinel([sentinel.url()], testkit::RedisSentinel::SERVICE);
    let crashed = config()
        .sentinel_master_auth("crashed", PASSWORD)
        .connect()
        .await
        .unwrap();
    let (holder, live) = (
        config().connect().await.unwrap(),
        config().connect().await.unwrap(),
    );
    let delay = behind_ten_dead(
        (holder, crashed, live),
        ("crash:sentinel", 10),
        &master,
        crash(&[&master], "crashed"),
    )
    .await;
    assert!(delay < BOUND, "{delay:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_clusters_shard() {
    let cluster = RedisCluster::start(3, 0);
    let nodes: Vec<&RedisServer> = cluster
        .master_ports()
        .into_iter()
        .map(|port| cluster.node(port))
        .collect();
    let urls = add_user(&nodes, "crashed").await;
    let name = "crash:cluster";
    let shard = cluster.node(cluster.master_of_slot(hash_slot(name.as_bytes())));
    let crashed = Config::cluster(urls)
        .response_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap();
    let mut clients = cluster.clients(2).await;
    let (live, holder) = (clients.pop().unwrap(), clients.pop().unwrap());
    let delay = behind_ten_dead(
        (holder, crashed, live),
        (name, 10),
        shard,
        crash(&nodes, "crashed"),
    )
    .await;
    assert!(delay < BOUND, "{delay:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redlock() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let all: Vec<&RedisServer> = masters.iter().collect();
    let urls = add_user(&all, "crashed").await;
    let plain: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let crashed = Config::redlock(urls).connect().await.unwrap();
    let (holder, live) = (
        Config::redlock(plain.clone()).connect().await.unwrap(),
        Config::redlock(plain).connect().await.unwrap(),
    );
    let delay = behind_ten_dead(
        (holder, crashed, live),
        // Over RedLock a client's waiters of one lock take turns in the client: the first of
        // them is queued on the masters.
        ("crash:redlock", 1),
        &masters[0],
        crash(&all, "crashed"),
    )
    .await;
    assert!(delay < BOUND, "{delay:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_candidates_cost_the_next_live_one_window() {
    let server = RedisServer::start();
    let url = add_user(&[&server], "crashed").await.remove(0);
    let crashed = Config::new(url).connect().await.unwrap();
    let (leader, live) = (
        Config::new(server.url()).connect().await.unwrap(),
        Config::new(server.url()).connect().await.unwrap(),
    );
    let name = "crash:election";
    let ttl = Duration::from_secs(10);
    let leading = leader.leader(name).ttl(ttl).campaign().await.unwrap();
    let doomed: Vec<JoinHandle<_>> = (0..10)
        .map(|_| {
            let c = crashed.clone();
            tokio::spawn(async move { c.leader(name).ttl(ttl).campaign().await.map(drop) })
        })
        .collect();
    until_queued_on(&server, name, 10).await;
    let next: JoinHandle<Instant> = tokio::spawn(async move {
        let elected = live.leader(name).ttl(ttl).campaign().await.unwrap();
        let at = Instant::now();
        elected.resign().await.unwrap();
        at
    });
    until_queued_on(&server, name, 11).await;
    crash(&[&server], "crashed").await;
    for task in &doomed {
        task.abort();
    }
    let resigned = Instant::now();
    leading.resign().await.unwrap();
    let at = tokio::time::timeout(Duration::from_secs(20), next)
        .await
        .expect("the live candidate is elected within 20 s")
        .unwrap();
    let delay = at.saturating_duration_since(resigned);
    eprintln!(
        "a live candidate behind 10 crashed candidates was elected {delay:?} after the resign"
    );
    assert!(delay < BOUND, "{delay:?}");
}
