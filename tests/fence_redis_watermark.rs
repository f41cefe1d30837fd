//! The per-lock watermark of `distlock::fence::redis::FencedStore` against real redis-servers:
//! once a higher token of a lock has written any key of the lock, or claimed them, no lower
//! token lands on any key of that lock, including keys the newer holder never wrote; a new
//! holder (a new leader) claims the moment it is elected; the watermark and a delete's
//! tombstone live for the store's window after their last write (for ever with
//! `Duration::MAX`), and the watermark still refuses a stale fence once the tombstone is gone;
//! per key, a deposed holder's write lands on an untouched key (the weaker promise); in a
//! Redis Cluster, as on one server (tests/fence_redis_one_rule.rs), a key without the lock's
//! hash tag is refused with `FenceCrossSlot`. Every key written per lock here carries its
//! lock's hash tag (`a:{acct}` under `acct`).

use std::time::Duration;

use distlock::fence::redis::{FencedStore, Stored};
use distlock::{Client, Config, Error, Fence};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::{RedisCluster, RedisServer};

const WINDOW: Duration = Duration::from_secs(90);

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

async fn store(server: &RedisServer) -> FencedStore<MultiplexedConnection> {
    FencedStore::new(server.conn().await, WINDOW)
}

/// A fence of `name` from a fresh fenced acquire, released at once (a stale holder keeps its
/// token: that is the point).
async fn token(c: &Client, name: &str) -> Fence {
    let guard = c.lock(name).fenced(true).acquire().await.unwrap();
    let fence = guard.fence().expect("fenced");
    guard.release().await.unwrap();
    fence
}

fn assert_fenced(result: Result<impl std::fmt::Debug, Error>, key: &str, old: &Fence, new: &Fence) {
    match result {
        Err(Error::Fenced {
            resource,
            token,
            seen,
        }) => assert_eq!(
            (resource.as_str(), token, seen),
            (key, old.token(), new.token())
        ),
        other => panic!("a stale write to {key}: {other:?}"),
    }
}

#[tokio::test]
async fn a_deposed_holder_is_refused_on_a_key_the_new_holder_never_wrote() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let mut store = store(&server).await;
    let (old, new) = (token(&c, "acct").await, token(&c, "acct").await);
    store.set("a:{acct}", 1, &old).await.unwrap();
    // The new holder writes one key of the lock; the deposed one tries others.
    store.set("b:{acct}", 2, &new).await.unwrap();
    assert_fenced(store.set("c:{acct}", 9, &old).await, "c:{acct}", &old, &new);
    assert_fenced(store.set("a:{acct}", 9, &old).await, "a:{acct}", &old, &new);
    assert_fenced(store.del("a:{acct}", &old).await, "a:{acct}", &old, &new);
    let c_exists: bool = conn.exists("c:{acct}").await.unwrap();
    assert!(!c_exists, "nothing written");
    let a: Stored<i64> = store.get("a:{acct}").await.unwrap().unwrap();
    assert_eq!((a.value, a.token), (1, old.token()));
    // The watermark is the lock's, under the default prefix, in the lock name's slot.
    let mark: String = conn.get("distlock:{acct}:watermark").await.unwrap();
    assert_eq!(mark, new.token().to_string());
    // Another lock's keys are not its business.
    store
        .set("a:{other}", 1, &Fence::new("other", 1))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_claim_refuses_a_deposed_holder_before_the_new_ones_first_write() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut store = store(&server).await;
    let old = token(&c, "job").await;
    store.set("state:{job}", "running", &old).await.unwrap();
    let new = token(&c, "job").await;
    // Without a claim (or a write) of the new holder, nothing tells the store yet.
    store
        .set("state:{job}", "still running", &old)
        .await
        .unwrap();
    store.claim(&new).await.unwrap();
    // Before any write of the new holder, on keys it never wrote:
    assert_fenced(
        store.set("state:{job}", "done", &old).await,
        "state:{job}",
        &old,
        &new,
    );
    assert_fenced(
        store.set("result:{job}", "x", &old).await,
        "result:{job}",
        &old,
        &new,
    );
    // A claim with the deposed token is refused too: it names the watermark.
    assert_fenced(
        store.claim(&old).await,
        "distlock:{job}:watermark",
        &old,
        &new,
    );
    // The same token claims again, and writes.
    store.claim(&new).await.unwrap();
    store.set("state:{job}", "taken over", &new).await.unwrap();
    let state: Stored<String> = store.get("state:{job}").await.unwrap().unwrap();
    assert_eq!(
        (state.value.as_str(), state.token),
        ("taken over", new.token())
    );
}

/// A leader deposed without knowing (its lock gone, as after a pause past its lease) while a
/// new leader is elected and claims at once: the deposed leader's write to a key the new one
/// never wrote is refused.
#[tokio::test]
async fn a_new_leader_claims_on_election_and_the_deposed_leader_is_refused() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let mut store = store(&server).await;
    let deposed = a
        .leader("scheduler")
        .identity("a")
        .campaign()
        .await
        .unwrap();
    store
        .set("last-run:{scheduler}", "a tick 1", &deposed.fence())
        .await
        .unwrap();
    let _: () = conn.del("distlock:{scheduler}").await.unwrap();
    let elected = b
        .leader("scheduler")
        .identity("b")
        .campaign()
        .await
        .unwrap();
    assert!(elected.term() > deposed.term());
    store.claim(&elected.fence()).await.unwrap();
    assert_fenced(
        store
            .set("next-run:{scheduler}", "a tick 2", &deposed.fence())
            .await,
        "next-run:{scheduler}",
        &deposed.fence(),
        &elected.fence(),
    );
    let next: Option<Stored<String>> = store.get("next-run:{scheduler}").await.unwrap();
    assert_eq!(next, None);
    elected.resign().await.unwrap();
    drop(deposed);
}

#[tokio::test]
async fn the_watermark_and_tombstones_live_for_the_window() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let mut store = store(&server).await;
    let window = WINDOW.as_millis() as i64;
    let within_window = |pttl: i64| pttl > window - 10_000 && pttl <= window;
    let (old, new) = (token(&c, "cart").await, token(&c, "cart").await);
    store.set("items:{cart}", "full", &old).await.unwrap();
    let mark = "distlock:{cart}:watermark";
    let pttl: i64 = conn.pttl(mark).await.unwrap();
    assert!(within_window(pttl), "watermark pttl {pttl}");
    // Each write restarts the watermark's life.
    let _: () = conn.pexpire(mark, 5_000).await.unwrap();
    assert!(store.del("items:{cart}", &new).await.unwrap());
    let (mark_pttl, tombstone_pttl): (i64, i64) = (
        conn.pttl(mark).await.unwrap(),
        conn.pttl("items:{cart}").await.unwrap(),
    );
    assert!(within_window(mark_pttl), "watermark pttl {mark_pttl}");
    assert!(
        within_window(tombstone_pttl),
        "tombstone pttl {tombstone_pttl}"
    );
    // The tombstone gone (as if expired first): the watermark still refuses the deposed
    // holder's fence, carried in a redelivered message.
    let _: () = conn.del("items:{cart}").await.unwrap();
    assert_fenced(
        store.set("items:{cart}", "full again", &old).await,
        "items:{cart}",
        &old,
        &new,
    );
    assert_eq!(store.get::<String>("items:{cart}").await.unwrap(), None);

    // `Duration::MAX`: kept for ever.
    let mut forever = FencedStore::new(server.conn().await, Duration::MAX);
    let kept = Fence::new("kept", 5);
    forever.set("value:{kept}", "x", &kept).await.unwrap();
    assert!(forever.del("value:{kept}", &kept).await.unwrap());
    let (mark_pttl, tombstone_pttl): (i64, i64) = (
        conn.pttl("distlock:{kept}:watermark").await.unwrap(),
        conn.pttl("value:{kept}").await.unwrap(),
    );
    assert_eq!((mark_pttl, tombstone_pttl), (-1, -1));
    // A claim keeps the watermark for the window too.
    forever.claim(&Fence::new("kept", 6)).await.unwrap();
    let claimed: i64 = conn.pttl("distlock:{kept}:watermark").await.unwrap();
    assert_eq!(claimed, -1);
    store.claim(&Fence::new("claimed", 1)).await.unwrap();
    let claimed: i64 = conn.pttl("distlock:{claimed}:watermark").await.unwrap();
    assert!(within_window(claimed), "claimed watermark pttl {claimed}");
}

#[tokio::test]
async fn the_watermark_prefix_is_the_users_and_a_bad_watermark_is_a_misuse() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let mut store = FencedStore::new(server.conn().await, WINDOW).watermark_prefix("app");
    store.set("k:{n}", 1, &Fence::new("n", 3)).await.unwrap();
    let mark: String = conn.get("app:{n}:watermark").await.unwrap();
    assert_eq!(mark, "3");
    // Something else at the watermark's key is never overwritten.
    let _: () = conn.set("app:{m}:watermark", "not a token").await.unwrap();
    match store.set("k2:{m}", 1, &Fence::new("m", 3)).await {
        Err(Error::FenceMismatch {
            resource,
            fenced_by: None,
            ..
        }) => assert_eq!(resource, "app:{m}:watermark"),
        other => panic!("{other:?}"),
    }
    let kept: String = conn.get("app:{m}:watermark").await.unwrap();
    assert_eq!(kept, "not a token");
    let k2: bool = conn.exists("k2:{m}").await.unwrap();
    assert!(!k2);
    // A lock name the lock would refuse (braces) is refused here too.
    let braces = store.set("k3", 1, &Fence::new("a}b", 3)).await;
    assert!(
        matches!(braces, Err(Error::InvalidKey { .. })),
        "{braces:?}"
    );
}

/// Per key, the weaker promise: a deposed holder's write lands on a key no newer holder has
/// written, and `claim` has nothing to raise.
#[tokio::test]
async fn per_key_a_deposed_holder_lands_on_an_untouched_key() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let mut store = store(&server).await.per_key();
    let (old, new) = (token(&c, "acct").await, token(&c, "acct").await);
    // No watermark, so no slot to share: keys without the lock's hash tag are written too.
    store.set("acct:b", 2, &new).await.unwrap();
    store.set("acct:c", 9, &old).await.unwrap();
    assert_fenced(store.set("acct:b", 9, &old).await, "acct:b", &old, &new);
    let marks: bool = conn.exists("distlock:{acct}:watermark").await.unwrap();
    assert!(!marks, "no watermark per key");
    let claim = store.claim(&new).await;
    assert!(
        matches!(claim, Err(Error::InvalidConfig { .. })),
        "{claim:?}"
    );
}

#[tokio::test]
async fn in_a_cluster_keys_carry_the_locks_hash_tag_or_fence_per_key() {
    let cluster = RedisCluster::start(3, 0);
    let conn = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let (old, new) = (Fence::new("job", 10), Fence::new("job", 20));
    let mut store = FencedStore::new(conn.clone(), WINDOW);
    // Keys with the lock's hash tag share its watermark's slot: per lock, as on one server.
    store.set("item:{job}:1", 1, &old).await.unwrap();
    store.claim(&new).await.unwrap();
    assert_fenced(
        store.set("item:{job}:2", 2, &old).await,
        "item:{job}:2",
        &old,
        &new,
    );
    store.set("item:{job}:2", 2, &new).await.unwrap();
    // A key in another slot: refused, naming the fix, and nothing written.
    match store.set("item:0", 0, &new).await {
        Err(Error::FenceCrossSlot {
            resource,
            lock,
            watermark,
        }) => assert_eq!(
            (resource.as_str(), lock.as_str(), watermark.as_str()),
            ("item:0", "job", "distlock:{job}:watermark")
        ),
        other => panic!("a key outside the lock's slot: {other:?}"),
    }
    assert_eq!(store.get::<i64>("item:0").await.unwrap(), None);

    // Per key: every master's slots, each key fenced on its own.
    let mut per_key = FencedStore::new(conn, WINDOW).per_key();
    for n in 0..12 {
        let key = format!("item:{n}");
        per_key.set(&key, n, &old).await.unwrap();
        per_key.set(&key, n + 1, &new).await.unwrap();
        assert_fenced(per_key.set(&key, 0, &old).await, &key, &old, &new);
        let stored: Stored<i64> = per_key.get(&key).await.unwrap().unwrap();
        assert_eq!((stored.value, stored.token), (n + 1, new.token()));
        assert!(per_key.del(&key, &new).await.unwrap());
    }
}
