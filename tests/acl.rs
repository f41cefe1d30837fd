//! Least privilege (issue 32, item 4): the core scenarios (a race, renewal, a waiter handed
//! the lock by pub/sub, fencing, permits, reads and writes, a set, a leader) under exactly the
//! ACL user the `distlock` crate docs give ("Least privilege", read from the docs:
//! `testkit::acl_line`) on one server, and a race and a handoff through Sentinel, a Redis
//! Cluster and a RedLock quorum under theirs, every server's `ACL LOG` empty for the user
//! afterwards; without the optional checks' permissions everything still works, and those
//! checks are all that is refused. A user without a permission the lock needs (a script, its
//! keys, a waiter's channel or `SUBSCRIBE`, a command a script runs; a RedLock majority that
//! refuses) gets `Error::PermissionDenied` naming the refusal, within a `wait`, at once.

use std::time::Duration;

use distlock::{Client, Config};
use futures_util::StreamExt;
use testkit::{acl_line, acl_refusals, eventually, until_queued, RedisServer, ACL_PASSWORD};
use tokio::time::Instant;

/// A client of `url` with short timeouts, so that a failure shows quickly.
async fn client(config: Config) -> Client {
    config
        .response_timeout(Duration::from_millis(800))
        .connect_timeout(Duration::from_millis(800))
        .connect()
        .await
        .expect("connect")
}

/// The core scenarios over two clients of one deployment, both logged in as the user under
/// test; `store` keeps the race's counter. Each asserts its own invariant.
async fn core_scenarios(a: &Client, b: &Client, store: redis::Client) {
    race(a, b, store).await;
    renewal(a).await;
    handoff(a, b).await;
    fencing(a, b).await;
    permits(a, b).await;
    reads_and_writes(a, b).await;
    sets(a, b).await;
    leader(a, b).await;
}

/// Two clients (two tasks each) race for one lock: only exclusion keeps the counter exact.
async fn race(a: &Client, b: &Client, store: redis::Client) {
    let mut racers = Vec::new();
    for client in [a, b, a, b] {
        let (client, store) = (client.clone(), store.clone());
        racers.push(tokio::spawn(async move {
            testkit::race_counter(client, store, "race", Duration::from_secs(5), 10, || {}).await
        }));
    }
    for racer in racers {
        racer.await.expect("a racer panicked");
    }
    let mut conn = store.get_multiplexed_async_connection().await.unwrap();
    let n: i64 = redis::cmd("GET")
        .arg("n")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 40, "every increment under the lock");
}

/// A renewed lock outlives its ttl three times over.
async fn renewal(a: &Client) {
    let held = a
        .lock("renewed")
        .ttl(Duration::from_millis(300))
        .renew(true)
        .run(tokio::time::sleep(Duration::from_millis(900)))
        .await;
    assert!(held.is_ok(), "renewed past its ttl: {held:?}");
}

/// A waiter is handed the lock by its release (pub/sub), not by a later look.
async fn handoff(a: &Client, b: &Client) {
    let guard = a
        .lock("handoff")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let guard = b
                .lock("handoff")
                .wait(Duration::from_secs(5))
                .acquire()
                .await;
            (guard, Instant::now())
        }
    });
    eventually(Duration::from_secs(2), "the waiter subscribed", || {
        let b = b.clone();
        async move { (b.waiting_channels() == 1).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (taken, at) = waiter.await.unwrap();
    taken
        .expect("the waiter takes the lock")
        .release()
        .await
        .unwrap();
    // A look without a message comes a second after the waiter's last attempt at the soonest.
    let after = at - released;
    assert!(
        after < Duration::from_millis(300),
        "taken {after:?} after the release"
    );
}

/// Fencing tokens rise across holders.
async fn fencing(a: &Client, b: &Client) {
    let first = a.lock("fenced").fenced(true).acquire().await.unwrap();
    let t1 = first.token().expect("a token");
    first.release().await.unwrap();
    let second = b.lock("fenced").fenced(true).acquire().await.unwrap();
    let t2 = second.token().expect("a token");
    second.release().await.unwrap();
    assert!(t2 > t1, "{t2} after {t1}");
}

/// At most two permit holders at once, and two reached.
async fn permits(a: &Client, b: &Client) {
    let clients = [a.clone(), b.clone()];
    let most =
        testkit::permit_race(&clients, (2, 3), ("permits", 2), Duration::from_millis(20)).await;
    assert_eq!(most, 2, "two permits, both used");
}

/// Readers overlap each other, writers overlap nobody.
async fn reads_and_writes(a: &Client, b: &Client) {
    let clients = [a.clone(), b.clone()];
    let (holds, rounds) = ((Duration::from_millis(20), Duration::from_millis(10)), 3);
    let inside = testkit::read_write_race(&clients, (2, 1), ("doc", rounds), holds).await;
    let seen = |n: &std::sync::atomic::AtomicUsize| n.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        !inside.overlap.load(std::sync::atomic::Ordering::SeqCst),
        "{inside:?}"
    );
    assert_eq!((seen(&inside.reads), seen(&inside.writes)), (12, 6));
}

/// A set of locks is taken all or none, and a waiting set gets it after the release.
async fn sets(a: &Client, b: &Client) {
    let set = a.lock_all(["acct:1", "acct:2"]).acquire().await.unwrap();
    let busy = b.lock("acct:2").acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            let set = b
                .lock_all(["acct:2", "acct:3"])
                .wait(Duration::from_secs(5))
                .acquire()
                .await;
            set.map(|guard| guard.names().map(str::to_owned).collect::<Vec<_>>())
        }
    });
    set.release().await.unwrap();
    let names = waiting.await.unwrap().expect("the waiting set is taken");
    assert_eq!(names, ["acct:2", "acct:3"]);
    eventually(Duration::from_secs(2), "the set released", || {
        let a = a.clone();
        async move { a.lock("acct:3").acquire().await.ok() }
    })
    .await;
}

/// A leader elected, observed, and replaced by the next candidate with a higher term.
async fn leader(a: &Client, b: &Client) {
    let first = a.leader("sched").identity("a").campaign().await.unwrap();
    let mut seen = Box::pin(b.leader("sched").observe());
    let shown = tokio::time::timeout(Duration::from_secs(3), seen.next()).await;
    let shown = shown
        .expect("the observer yields")
        .expect("the stream lives");
    let shown = shown.expect("the observer's client is installed");
    assert_eq!(shown.leader().map(|l| l.term), Some(first.term()));
    let next = tokio::spawn({
        let b = b.clone();
        async move { b.leader("sched").identity("b").campaign().await }
    });
    eventually(Duration::from_secs(2), "the next candidate waits", || {
        let b = b.clone();
        async move { (b.waiting_channels() >= 1).then_some(()) }
    })
    .await;
    let term = first.term();
    first.resign().await.unwrap();
    let second = next.await.unwrap().expect("the next candidate is elected");
    assert!(second.term() > term, "{} after {term}", second.term());
    second.resign().await.unwrap();
}

/// `redis://distlock:<password>@127.0.0.1:<port>/`: the documented user's URL.
fn user_url(port: u16) -> String {
    format!("redis://distlock:{ACL_PASSWORD}@127.0.0.1:{port}/")
}

/// Runs the documented lines whose comments start with `labels` on `server`.
async fn documented_user(server: &RedisServer, labels: &[&str]) {
    let mut admin = server.conn().await;
    for label in labels {
        acl_line(label).apply(&mut admin).await;
    }
}

/// Asserts that `ACL LOG` on the server behind `admin` refused `distlock` nothing (but
/// `CLIENT SETINFO`, which redis-rs sends at connect from Redis 7.2 on and whose refusal it
/// ignores).
async fn nothing_refused(admin: &mut redis::aio::MultiplexedConnection, on: &str) {
    let refused: Vec<_> = acl_refusals(admin, "distlock")
        .await
        .into_iter()
        .filter(|(_, object)| object != "client|setinfo")
        .collect();
    assert!(
        refused.is_empty(),
        "{on} refused the documented user: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_under_the_documented_user() {
    let server = RedisServer::start();
    documented_user(&server, &["One server", "The optional checks"]).await;
    let url = user_url(server.port());
    let (a, b) = (
        client(Config::new(url.clone())).await,
        client(Config::new(url)).await,
    );
    core_scenarios(&a, &b, server.client()).await;
    let mut admin = server.conn().await;
    nothing_refused(&mut admin, "the server").await;
    // The optional checks ran: the clients' identity records are there.
    let records: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:client:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_optional_checks_the_locks_work_the_same() {
    let server = RedisServer::start();
    documented_user(&server, &["One server"]).await;
    let url = user_url(server.port());
    let (a, b) = (
        client(Config::new(url.clone())).await,
        client(Config::new(url)).await,
    );
    core_scenarios(&a, &b, server.client()).await;
    // Refused: the optional checks, and nothing else.
    let refused = acl_refusals(&mut server.conn().await, "distlock").await;
    let optional = |(reason, object): &(String, String)| match reason.as_str() {
        "command" => ["config|get", "info", "client|setinfo"].contains(&&**object),
        "key" => object.starts_with("distlock:client:"),
        _ => false,
    };
    assert!(refused.iter().all(optional), "{refused:?}");
    assert!(
        refused.iter().any(|(reason, _)| reason == "key"),
        "no record tried: {refused:?}"
    );
    for check in ["config|get", "info"] {
        assert!(
            refused.iter().any(|(_, o)| o == check),
            "{check} not tried: {refused:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_under_the_documented_users() {
    let master = RedisServer::start();
    let sentinel = testkit::LoneSentinel::start(&master, None);
    documented_user(&master, &["Sentinel, on the master", "The optional checks"]).await;
    let sentinel_admin = redis::Client::open(sentinel.url()).unwrap();
    let mut sentinel_admin = sentinel_admin
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    acl_line("Sentinel, on every sentinel")
        .apply(&mut sentinel_admin)
        .await;
    let port = sentinel.url().rsplit(':').next().unwrap().parse().unwrap();
    let config = || {
        Config::sentinel([user_url(port)], testkit::RedisSentinel::SERVICE)
            .sentinel_master_auth("distlock", ACL_PASSWORD)
    };
    let (a, b) = (client(config()).await, client(config()).await);
    race(&a, &b, master.client()).await;
    handoff(&a, &b).await;
    nothing_refused(&mut master.conn().await, "the master").await;
    nothing_refused(&mut sentinel_admin, "the sentinel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_under_the_documented_user() {
    let cluster = testkit::RedisCluster::start_single_master();
    let node = cluster.node(cluster.master_ports()[0]);
    documented_user(node, &["Redis Cluster", "The optional checks"]).await;
    let config = || Config::cluster([user_url(node.port())]);
    let (a, b) = (client(config()).await, client(config()).await);
    race(&a, &b, node.client()).await;
    handoff(&a, &b).await;
    permits(&a, &b).await;
    nothing_refused(&mut node.conn().await, "the node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_under_the_documented_user() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for master in &masters {
        documented_user(master, &["One server", "The optional checks"]).await;
    }
    let urls: Vec<String> = masters.iter().map(|m| user_url(m.port())).collect();
    let (a, b) = (
        client(Config::redlock(urls.clone())).await,
        client(Config::redlock(urls)).await,
    );
    race(&a, &b, masters[0].client()).await;
    handoff(&a, &b).await;
    fencing(&a, &b).await;
    for master in &masters {
        nothing_refused(&mut master.conn().await, "a master").await;
    }
}

/// The documented one-server user with `withheld` taken away (more `ACL SETUSER` rules).
async fn user_without(server: &RedisServer, withheld: &[&str]) -> Client {
    let mut admin = server.conn().await;
    acl_line("One server").apply(&mut admin).await;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("distlock")
        .arg(withheld)
        .query_async(&mut admin)
        .await
        .unwrap();
    client(Config::new(user_url(server.port()))).await
}

/// Asserts that `result` is `PermissionDenied` for `op` of lock `key` whose refusal contains
/// `says`, and that it came well within the 5 s the caller would have waited.
fn denied<T: std::fmt::Debug>(
    result: Result<T, distlock::Error>,
    started: Instant,
    (op, key): (distlock::Operation, &str),
    says: &str,
) {
    let elapsed = started.elapsed();
    match result {
        Err(distlock::Error::PermissionDenied {
            op: denied_op,
            key: denied_key,
            refused,
        }) => {
            assert_eq!((denied_op, denied_key.as_str()), (op, key));
            assert!(refused.contains(says), "{refused}");
        }
        other => panic!("not PermissionDenied: {other:?}"),
    }
    assert!(
        elapsed < Duration::from_secs(2),
        "refused after {elapsed:?}"
    );
}

/// A wait the refused calls below would sit through if they were retried.
const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_missing_permission_is_a_typed_error_naming_it() {
    use distlock::Operation::{Acquire, Release, Subscribe};
    let server = RedisServer::start();
    // No scripts: a fenced acquire is one.
    let c = user_without(&server, &["-evalsha"]).await;
    let started = Instant::now();
    let fenced = c.lock("job").fenced(true).wait(WAIT).acquire().await;
    denied(fenced, started, (Acquire, "job"), "'evalsha' command");

    // Not the lock keys: even the plain acquire (no script) is refused.
    let c = user_without(&server, &["resetkeys", "~other:*"]).await;
    let started = Instant::now();
    let plain = c.lock("job").wait(WAIT).acquire().await;
    // Redis 7.0 says "one of the keys used as arguments", Redis 8 and Valkey 8 "a key".
    denied(plain, started, (Acquire, "job"), "key");

    // A command a script runs (a permit's `ZADD`): refused inside the script.
    let c = user_without(&server, &["-zadd"]).await;
    let started = Instant::now();
    let permit = c.semaphore("pool", 2).wait(WAIT).acquire().await;
    denied(permit, started, (Acquire, "pool"), "script");

    // A waiter without `SUBSCRIBE`, behind another user's hold: refused, not left waiting.
    let holder = client(Config::new(server.url())).await;
    let held = holder
        .lock("busy")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let c = user_without(&server, &["-subscribe"]).await;
    let started = Instant::now();
    let waiter = c.lock("busy").wait(WAIT).acquire().await;
    denied(waiter, started, (Subscribe, "busy"), "'subscribe' command");

    // Without the release channels: the waiter's subscription, and a release (it publishes).
    let c = user_without(&server, &["resetchannels"]).await;
    let started = Instant::now();
    let waiter = c.lock("busy").wait(WAIT).acquire().await;
    denied(waiter, started, (Subscribe, "busy"), "channel");
    // A release publishes when someone waits (a lock nobody marked is deleted and nothing
    // more): another user's waiter marks it first.
    let own = c.lock("own").acquire().await.unwrap();
    let other = holder.clone();
    let waiter = tokio::spawn(async move { other.lock("own").wait(WAIT).acquire().await });
    until_queued(&server.conn().await, "own", 1).await;
    let started = Instant::now();
    denied(own.release().await, started, (Release, "own"), "channel");
    // Refused at its message, the release let nothing go: the lock stays the refused
    // owner's until its ttl, and the waiter waits for it.
    waiter.abort();
    // An observer of a leader cannot subscribe either: its stream ends with the refusal, it
    // does not hang.
    let mut observer = Box::pin(c.leader("sched").observe());
    let ended = tokio::time::timeout(Duration::from_secs(2), observer.next()).await;
    assert!(
        matches!(
            ended,
            Ok(Some(Err(distlock::Error::PermissionDenied { .. })))
        ),
        "{ended:?}"
    );
    let after = tokio::time::timeout(Duration::from_secs(2), observer.next()).await;
    assert!(matches!(after, Ok(None)), "{after:?}");
    held.release().await.unwrap();
}

#[tokio::test]
async fn redlock_masters_that_refuse_the_user_are_the_error_not_a_lost_quorum() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for master in &masters {
        user_without(master, &["-evalsha"]).await;
    }
    let urls = masters.iter().map(|m| user_url(m.port()));
    let c = client(Config::redlock(urls)).await;
    let started = Instant::now();
    let fenced = c.lock("job").fenced(true).wait(WAIT).acquire().await;
    denied(
        fenced,
        started,
        (distlock::Operation::Acquire, "job"),
        "'evalsha' command",
    );
}
