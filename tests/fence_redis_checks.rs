//! The first write's checks of `distlock::fence::redis::FencedStore` against real
//! redis-servers: a `maxmemory-policy` that can evict watermarks and tombstones (`volatile-*`,
//! `allkeys-*`) is reported with `FenceEviction` before anything is written, read through
//! `INFO memory` or, where an ACL refuses it, `CONFIG GET`, and reported as unknown when both
//! are refused; on every master of a Cluster; `allow_eviction` skips the check; a failed check
//! is made again, a passed one is not (clones share it); a zero window and a bad watermark
//! prefix are refused.

use std::time::Duration;

use distlock::fence::redis::FencedStore;
use distlock::{Error, Fence};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::AsyncCommands;
use testkit::{RedisCluster, RedisServer};

const WINDOW: Duration = Duration::from_secs(60);

async fn set_policy<C: ConnectionLike + Send>(conn: &mut C, policy: &str) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .exec_async(conn)
        .await
        .unwrap();
}

async fn connect(url: String) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn assert_eviction(result: Result<impl std::fmt::Debug, Error>, expected: Option<&str>) {
    match result {
        Err(Error::FenceEviction { policy }) => assert_eq!(policy.as_deref(), expected),
        other => panic!("expected FenceEviction {expected:?}: {other:?}"),
    }
}

#[tokio::test]
async fn a_policy_that_can_evict_is_reported_at_the_first_write_and_nothing_is_written() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let fence = Fence::new("n", 1);
    for policy in [
        "volatile-lru",
        "volatile-ttl",
        "allkeys-lru",
        "allkeys-random",
    ] {
        set_policy(&mut conn, policy).await;
        let mut store = FencedStore::new(server.conn().await, WINDOW);
        assert_eviction(store.set("k:{n}", 1, &fence).await, Some(policy));
        assert_eviction(store.del("k:{n}", &fence).await, Some(policy));
        assert_eviction(store.claim(&fence).await, Some(policy));
        let keys: Vec<String> = conn.keys("*").await.unwrap();
        assert!(keys.is_empty(), "{policy}: nothing written: {keys:?}");
        // Reading needs no check.
        assert_eq!(store.get::<i64>("k:{n}").await.unwrap(), None);
        // Accepting the risk skips the check.
        let mut risky = FencedStore::new(server.conn().await, WINDOW).allow_eviction();
        risky.set("k:{n}", 1, &fence).await.unwrap();
        let _: () = conn.flushall().await.unwrap();
    }
    // A failed check is made again at the next write: fixed, the same store writes.
    let mut store = FencedStore::new(server.conn().await, WINDOW);
    assert_eviction(store.set("k:{n}", 1, &fence).await, Some("allkeys-random"));
    set_policy(&mut conn, "noeviction").await;
    store.set("k:{n}", 1, &fence).await.unwrap();
}

#[tokio::test]
async fn the_policy_is_read_through_config_get_where_info_is_refused() {
    let server = RedisServer::start();
    let mut admin = server.conn().await;
    set_policy(&mut admin, "volatile-lru").await;
    let fence = Fence::new("n", 1);
    let rules = |refused: &'static [&'static str]| {
        let mut rules = vec!["~*", "&*", "+@all"];
        rules.extend(refused);
        rules
    };
    // INFO allowed, CONFIG refused: INFO says.
    let url = server
        .acl_user("no-config", "pw", &rules(&["-config"]))
        .await;
    let mut store = FencedStore::new(connect(url).await, WINDOW);
    assert_eviction(store.set("k:{n}", 1, &fence).await, Some("volatile-lru"));
    // INFO refused, CONFIG allowed: CONFIG GET says.
    let url = server.acl_user("no-info", "pw", &rules(&["-info"])).await;
    let mut store = FencedStore::new(connect(url).await, WINDOW);
    assert_eviction(store.set("k:{n}", 1, &fence).await, Some("volatile-lru"));
    // Both refused: unknown, reported; `allow_eviction` is the way past it.
    let url = server
        .acl_user("blind", "pw", &rules(&["-info", "-config"]))
        .await;
    let mut store = FencedStore::new(connect(url.clone()).await, WINDOW);
    assert_eviction(store.set("k:{n}", 1, &fence).await, None);
    set_policy(&mut admin, "noeviction").await;
    assert_eviction(store.set("k:{n}", 1, &fence).await, None);
    let mut store = FencedStore::new(connect(url).await, WINDOW).allow_eviction();
    store.set("k:{n}", 1, &fence).await.unwrap();
}

/// The check is made at a store's first write, once: clones share it, and a policy changed
/// afterwards is seen only by a new store.
#[tokio::test]
async fn the_check_is_made_once_per_store_and_its_clones() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let fence = Fence::new("n", 1);
    let mut store = FencedStore::new(server.conn().await, WINDOW);
    let mut clone = store.clone();
    store.set("a:{n}", 1, &fence).await.unwrap();
    set_policy(&mut conn, "allkeys-lru").await;
    store.set("a:{n}", 2, &fence).await.unwrap();
    clone.set("b:{n}", 1, &fence).await.unwrap();
    let mut fresh = FencedStore::new(server.conn().await, WINDOW);
    assert_eviction(fresh.set("c:{n}", 1, &fence).await, Some("allkeys-lru"));
}

#[tokio::test]
async fn a_zero_window_or_a_bad_prefix_is_refused_at_the_first_write() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let fence = Fence::new("n", 1);
    let invalid = |result: Result<(), Error>| {
        assert!(
            matches!(result, Err(Error::InvalidConfig { .. })),
            "{result:?}"
        )
    };
    let mut zero = FencedStore::new(server.conn().await, Duration::ZERO);
    invalid(zero.set("k:{n}", 1, &fence).await);
    for prefix in ["", "a{b", "a}b"] {
        let mut bad = FencedStore::new(server.conn().await, WINDOW).watermark_prefix(prefix);
        invalid(bad.set("k:{n}", 1, &fence).await);
    }
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert!(keys.is_empty(), "nothing written: {keys:?}");
}

#[tokio::test]
async fn in_a_cluster_every_master_is_checked() {
    let cluster = RedisCluster::start(3, 0);
    let conn = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let fence = Fence::new("job", 1);
    FencedStore::new(conn.clone(), WINDOW)
        .set("item:{job}", 1, &fence)
        .await
        .unwrap();
    // One master of three may evict: reported, whichever master the key lives on.
    let evicting = cluster.master_ports()[2];
    let mut node = connect(cluster.node(evicting).url()).await;
    set_policy(&mut node, "volatile-lfu").await;
    let mut store = FencedStore::new(conn, WINDOW);
    assert_eviction(
        store.set("item:{job}", 2, &fence).await,
        Some("volatile-lfu"),
    );
}

/// The commands the crate docs list for a fenced store's user (section "ACL") are enough:
/// `EVALSHA`, `SCRIPT LOAD`, the script's commands on the values and the watermarks, `HMGET`
/// to read, and `INFO` for the first write's check.
#[tokio::test]
async fn the_documented_commands_are_enough() {
    let server = RedisServer::start();
    let rules = [
        "~*",
        "+evalsha",
        "+script|load",
        "+hset",
        "+hmget",
        "+hdel",
        "+type",
        "+pexpire",
        "+persist",
        "+get",
        "+set",
        "+info",
    ];
    let url = server.acl_user("fencer", "pw", &rules).await;
    let mut store = FencedStore::new(connect(url).await, WINDOW);
    let (old, new) = (Fence::new("n", 1), Fence::new("n", 2));
    store.set("k:{n}", 1, &old).await.unwrap();
    store.claim(&new).await.unwrap();
    assert!(store.set("k2:{n}", 1, &old).await.unwrap_err().is_fenced());
    assert!(store.del("k:{n}", &new).await.unwrap());
    assert_eq!(store.get::<i64>("k:{n}").await.unwrap(), None);
}
