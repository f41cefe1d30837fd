//! Redis Sentinel (`Config::sentinel`) against a real deployment made by the test support:
//! one master, one replica and three sentinels (`redis-server <file> --sentinel`). Locks through
//! the master the sentinels name; a renewed holder keeps its lock across `SENTINEL FAILOVER`
//! with no second holder, and renews and releases on the new master; a waiter subscribed
//! before the failover is woken by the release on the new master; sentinels that cannot be
//! reached, or that do not know the service, fail the connect with a typed error in time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Client, Config, Error};
use redis::AsyncCommands;
use testkit::proxy::Proxy;
use testkit::{LoneSentinel, RedisSentinel, RedisServer, ServerOptions};

async fn client(group: &RedisSentinel) -> Client {
    config(group)
        .connect()
        .await
        .expect("connect through the sentinels")
}

fn config(group: &RedisSentinel) -> Config {
    Config::sentinel(group.sentinel_urls(), RedisSentinel::SERVICE)
        .response_timeout(Duration::from_secs(3))
        .replica_timeout(Duration::from_millis(500))
}

/// `SENTINEL FAILOVER`, off the runtime's threads (the helper polls with `redis-cli`).
async fn failover(group: &Arc<RedisSentinel>) -> u16 {
    let group = group.clone();
    tokio::task::spawn_blocking(move || group.failover())
        .await
        .unwrap()
}

async fn lock_exists(group: &RedisSentinel, port: u16, name: &str) -> bool {
    let mut conn = group.server(port).conn().await;
    conn.exists(format!("distlock:{{{name}}}")).await.unwrap()
}

#[tokio::test]
async fn acquire_release_and_busy_through_the_master_the_sentinels_name() {
    let group = RedisSentinel::start();
    let master = group.master_port();
    let (a, b) = (client(&group).await, client(&group).await);
    let guard = a
        .lock("plain")
        .min_replicas(1)
        .acquire()
        .await
        .expect("taken on the master, acknowledged by the replica");
    assert!(lock_exists(&group, master, "plain").await);
    assert!(b.lock("plain").acquire().await.unwrap_err().is_busy());
    guard.release().await.expect("released");
    assert!(!lock_exists(&group, master, "plain").await);
    let again = b.lock("plain").acquire().await.expect("free again");
    again.release().await.unwrap();

    // A `WAIT` longer than the response timeout is still answered (the call's bound includes
    // the replica timeout): two replicas asked for, one there.
    let patient = config(&group)
        .response_timeout(Duration::from_millis(300))
        .replica_timeout(Duration::from_millis(600))
        .connect()
        .await
        .unwrap();
    match patient.lock("patient").min_replicas(2).acquire().await {
        Err(Error::Unreplicated {
            acknowledged: 1,
            required: 2,
            ..
        }) => {}
        other => panic!("expected Unreplicated (1 of 2), got {other:?}"),
    }

    // A service the sentinels do not know: the connect says so, naming it.
    let started = Instant::now();
    let error = Config::sentinel(group.sentinel_urls(), "no-such-service")
        .connect()
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered at once"
    );
    match &error {
        Error::Connect { source, .. } => {
            assert_eq!(
                source.kind(),
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "{error}"
            );
            assert!(error.to_string().contains("no-such-service"), "{error}");
        }
        other => panic!("expected Error::Connect, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_sentinels_fail_the_connect_within_the_connect_timeout() {
    // Nothing listens on these ports.
    let urls: Vec<String> = (0..3)
        .map(|_| format!("redis://127.0.0.1:{}", testkit::free_port()))
        .collect();
    let connect_timeout = Duration::from_secs(1);
    let started = Instant::now();
    let error = Config::sentinel(urls, "locks")
        .connect_timeout(connect_timeout)
        .connect()
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < connect_timeout,
        "refused at once: {:?}",
        started.elapsed()
    );
    match &error {
        Error::Connect { source, .. } => {
            assert!(source.is_io_error(), "{error}");
            assert!(error.is_transient(), "{error}");
            assert!(error.to_string().contains("service `locks`"), "{error}");
        }
        other => panic!("expected Error::Connect, got {other:?}"),
    }
    // No sentinel at all, or no service name: refused before connecting.
    let none = Config::sentinel(Vec::<String>::new(), "locks").validate();
    assert!(matches!(none, Err(Error::InvalidConfig { .. })));
    let nameless = Config::sentinel(["redis://127.0.0.1:26379"], " ").validate();
    assert!(nameless.unwrap_err().to_string().contains("service name"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_holder_keeps_its_lock_across_sentinel_failover() {
    let group = Arc::new(RedisSentinel::start());
    let old_master = group.master_port();
    let holder = client(&group).await;
    // Until the old master rejoins as the new master's replica (Sentinel converts it some 10 s
    // after the switch), no replica acknowledges the renewals: they do not extend the lease
    // (`min_replicas`), so the ttl must outlast that gap.
    let ttl = Duration::from_secs(24);
    let guard = holder
        .lock("failover")
        .ttl(ttl)
        .renew(true)
        .min_replicas(1)
        .acquire()
        .await
        .expect("taken and acknowledged by the replica");
    // A contender that keeps trying throughout: it must never get the lock while it is held.
    let contender = client(&group).await;
    let (stolen, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let attempts = {
        let (stolen, stop) = (stolen.clone(), stop.clone());
        tokio::spawn(async move {
            let mut attempts = 0;
            while stop.load(Ordering::Acquire) == 0 {
                attempts += 1;
                if let Ok(g) = contender.lock("failover").acquire().await {
                    stolen.fetch_add(1, Ordering::AcqRel);
                    drop(g);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            attempts
        })
    };
    let started = tokio::time::Instant::now();
    let new_master = failover(&group).await;
    assert_ne!(new_master, old_master);
    // An acknowledged renewal sent after the failover began: only the new master could have
    // had it acknowledged (the old master lost its replica at the promotion, and refuses
    // writes once it is a replica itself).
    testkit::eventually(
        ttl / 2,
        "a renewal acknowledged on the new master",
        || async { (guard.guaranteed_until() > started + ttl).then_some(()) },
    )
    .await;
    guard
        .ensure_held()
        .expect("the lease survived the failover");
    // And the key on the new master expires later than any renewal made before the failover
    // began could have set: renewals ran there.
    let mut conn = group.server(new_master).conn().await;
    let pttl: u64 = conn.pttl("distlock:{failover}").await.unwrap();
    let expires = tokio::time::Instant::now() + Duration::from_millis(pttl);
    assert!(
        expires > started + ttl,
        "renewed on the new master (pttl {pttl} ms)"
    );
    stop.store(1, Ordering::Release);
    let attempts = attempts.await.unwrap();
    assert!(attempts > 20, "the contender kept trying: {attempts}");
    assert_eq!(stolen.load(Ordering::Acquire), 0, "no second holder");
    guard.release().await.expect("released on the new master");
    assert!(!lock_exists(&group, new_master, "failover").await);
    // And the client keeps working against the new master, once a replica is attached to it
    // again (Sentinel reconfigures the old master as its replica some time after the switch;
    // until then `min_replicas(1)` is rightly refused as `Unreplicated`).
    let again = testkit::eventually(
        Duration::from_secs(20),
        "a lock acknowledged by a replica of the new master",
        || async { holder.lock("failover").min_replicas(1).acquire().await.ok() },
    )
    .await;
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_on_the_new_master() {
    let group = Arc::new(RedisSentinel::start());
    let (holder, waiter) = (client(&group).await, client(&group).await);
    // A 30 s lease: only the release message can wake the waiter within the test.
    let guard = holder
        .lock("wake")
        .ttl(Duration::from_secs(30))
        .min_replicas(1)
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let guard = waiter
                .lock("wake")
                .wait(Duration::from_secs(40))
                .acquire()
                .await
                .expect("woken and acquired");
            let woken = Instant::now();
            guard.release().await.unwrap();
            woken
        }
    });
    testkit::eventually(Duration::from_secs(5), "the waiter subscribed", || async {
        (waiter.waiting_channels() == 1).then_some(())
    })
    .await;
    // The failover, in two steps: the switch, then the old master made a replica.
    let old_master = group.master_port();
    group.start_failover();
    let new_master = testkit::eventually(Duration::from_secs(10), "the switch", || async {
        Some(group.master_port()).filter(|&port| port != old_master)
    })
    .await;
    // Right after the switch the old master still takes writes (Sentinel reconfigures it
    // seconds later): the client has followed the sentinels' announcement already, so new
    // locks land on the new master.
    let moved = testkit::eventually(Duration::from_secs(2), "locks on the new master", || {
        let holder = holder.clone();
        let group = group.clone();
        async move {
            let guard = holder.lock("moved").acquire().await.ok()?;
            let there = lock_exists(&group, new_master, "moved").await;
            guard.release().await.ok()?;
            there.then_some(())
        }
    });
    moved.await;
    let (role,): (String,) = redis::cmd("ROLE")
        .query_async(&mut group.server(old_master).conn().await)
        .await
        .map(|(role, _, _): (String, redis::Value, redis::Value)| (role,))
        .unwrap();
    assert_eq!(role, "master", "the old master is not reconfigured yet");
    let settle = group.clone();
    tokio::task::spawn_blocking(move || settle.wait_until_settled(new_master))
        .await
        .unwrap();
    let released = Instant::now();
    guard.release().await.expect("released on the new master");
    let woken = waiting.await.unwrap();
    let after = woken.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(5),
        "woken by the release message on the new master ({new_master}), not the ttl: {after:?}"
    );
}

#[tokio::test]
async fn the_master_password_is_the_masters_not_the_sentinels() {
    let master = RedisServer::start_with(ServerOptions {
        password: Some("m4ster-secret".to_owned()),
        ..Default::default()
    });
    let sentinel = LoneSentinel::start(&master, None);
    let config = || Config::sentinel([sentinel.url()], RedisSentinel::SERVICE);
    let client = config()
        .sentinel_master_auth("", "m4ster-secret")
        .connect()
        .await
        .expect("the master's password from sentinel_master_auth");
    let guard = client.lock("auth").acquire().await.expect("acquired");
    guard.release().await.unwrap();
    // Without it, or with a wrong one, the master refuses: at once (not retried as if a
    // failover were under way), at connect, and the password is never shown.
    let started = Instant::now();
    let error = config().connect().await.unwrap_err();
    assert!(
        matches!(&error, Error::Connect { source, .. } if source.code() == Some("NOAUTH")),
        "{error:?}"
    );
    let wrong = config()
        .sentinel_master_auth("", "not-it")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(&wrong, Error::Connect { source, .. } if !source.is_io_error()),
        "{wrong:?}"
    );
    assert!(!wrong.to_string().contains("not-it"), "{wrong}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_master_is_killed_the_client_reaches_the_promoted_replica() {
    let mut group = RedisSentinel::start();
    let (holder, other) = (client(&group).await, client(&group).await);
    // Acknowledged by the replica before the master dies: it is on the replica that the
    // sentinels promote.
    let held = holder
        .lock("kept")
        .ttl(Duration::from_secs(60))
        .min_replicas(1)
        .acquire()
        .await
        .unwrap();
    let group_ref = &mut group;
    let new_master = tokio::task::block_in_place(|| group_ref.kill_master());
    // The client finds the new master by itself (its connections dropped with the old one):
    // the acknowledged lock is still held there, and new locks are taken there.
    let fresh = testkit::eventually(Duration::from_secs(10), "a lock on the new master", || {
        let other = other.clone();
        async move { other.lock("fresh").acquire().await.ok() }
    })
    .await;
    assert!(lock_exists(&group, new_master, "fresh").await);
    fresh.release().await.unwrap();
    let busy = other.lock("kept").acquire().await.unwrap_err();
    assert!(busy.is_busy(), "the acknowledged lock survived: {busy}");
    held.release().await.expect("released on the new master");
    assert!(!lock_exists(&group, new_master, "kept").await);
}

/// `Config::sentinel_address_map`: the servers the sentinels name are reached where the map
/// says (here, a proxy of each), before and after a failover; the announced address is still
/// what the client compares with the sentinels' answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_the_sentinels_name_are_reached_through_the_address_map() {
    let group = Arc::new(RedisSentinel::start());
    let mut proxies = Vec::new();
    for server in group.servers() {
        proxies.push((server.port(), Proxy::to(server).await));
    }
    let map: Vec<(String, String)> = proxies
        .iter()
        .map(|(port, proxy)| (format!("127.0.0.1:{port}"), proxy.addr().to_string()))
        .collect();
    let proxy_of = |port: u16| &proxies.iter().find(|(p, _)| *p == port).unwrap().1;
    let mapped = config(&group)
        .response_timeout(Duration::from_millis(500))
        .sentinel_address_map(map)
        .connect()
        .await
        .expect("connect through the map");
    let master = group.master_port();
    let guard = mapped.lock("mapped").acquire().await.expect("taken");
    assert!(lock_exists(&group, master, "mapped").await);
    assert!(
        proxy_of(master).accepted() >= 1,
        "the master reached through its proxy"
    );
    guard.release().await.unwrap();
    // Only through the map: with the master's proxy black-holed, a call times out.
    proxy_of(master).set_blackhole(true);
    let cut = mapped.lock("cut").acquire().await.unwrap_err();
    assert!(matches!(cut, Error::Timeout { .. }), "{cut}");
    proxy_of(master).set_blackhole(false);

    // Before the failover, nothing reached the replicas (their proxies' counts).
    let before: Vec<(u16, u64)> = proxies.iter().map(|(p, x)| (*p, x.accepted())).collect();
    let promoted = failover(&group).await;
    let before = before.iter().find(|(p, _)| *p == promoted).unwrap().1;
    let fresh = testkit::eventually(Duration::from_secs(10), "a lock on the new master", || {
        let mapped = mapped.clone();
        async move { mapped.lock("after").acquire().await.ok() }
    })
    .await;
    assert!(lock_exists(&group, promoted, "after").await);
    assert!(
        proxy_of(promoted).accepted() > before,
        "the promoted replica reached through its proxy"
    );
    fresh.release().await.unwrap();
}
