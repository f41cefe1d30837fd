//! Fenced writes to the user's own Redis data (`distlock::fence::redis::FencedStore`) against
//! real redis-servers: a stale holder's `set` and `del` are refused and change nothing, the
//! same token writes as often as it likes (a body that writes twice, a re-entered body), a
//! delete's tombstone keeps a stale holder from writing the value back for the store's window,
//! a key of the lock's hash slot written under another lock (or holding a plain value) is a
//! misuse, a key outside the lock's slot is refused before anything is sent (every key written
//! under lock `L` carries the hash tag `{L}`: `balance:{acct}` under `acct`), tokens compare
//! exactly as `u64`s, the data may live on another server than the lock or in a Redis Cluster,
//! and `distlock::fence()` says why it has no fence to give. The per-lock watermark, `claim`,
//! the window and the Cluster rule: tests/fence_redis_watermark.rs; the one rule on every
//! deployment: tests/fence_redis_one_rule.rs; the first write's checks:
//! tests/fence_redis_checks.rs.

use std::time::Duration;

use distlock::fence::redis::{FencedStore, Stored};
use distlock::{distributed_lock, hash_slot, Client, Config, Error, Fence};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::RedisServer;

/// How long a fence can still arrive in these tests: an hour.
const WINDOW: Duration = Duration::from_secs(3600);

async fn store(server: &RedisServer) -> FencedStore<MultiplexedConnection> {
    FencedStore::new(server.conn().await, WINDOW)
}

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url()).connect().await.expect("connect")
}

/// A fence of `name` from a fresh fenced acquire (released at once: the token stays valid for
/// the store, which is the point: a stale holder keeps its token).
async fn token(c: &Client, name: &str) -> Fence {
    let guard = c.lock(name).fenced(true).acquire().await.unwrap();
    let fence = guard.fence().expect("fenced");
    guard.release().await.unwrap();
    fence
}

#[tokio::test]
async fn a_stale_holder_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut store = store(&server).await;
    let (old, new) = (token(&c, "acct").await, token(&c, "acct").await);
    assert!(new.token() > old.token());

    store.set("balance:{acct}", 10, &old).await.unwrap();
    store.set("balance:{acct}", 20, &new).await.unwrap();
    match store.set("balance:{acct}", 99, &old).await {
        Err(Error::Fenced {
            resource,
            token,
            seen,
        }) => {
            assert_eq!(resource, "balance:{acct}");
            assert_eq!((token, seen), (old.token(), new.token()));
        }
        other => panic!("a stale set: {other:?}"),
    }
    let stored: Stored<i64> = store.get("balance:{acct}").await.unwrap().unwrap();
    assert_eq!(
        (stored.value, stored.token, stored.lock.as_str()),
        (20, new.token(), "acct")
    );
    // A stale delete is refused too.
    assert!(store
        .del("balance:{acct}", &old)
        .await
        .unwrap_err()
        .is_fenced());
    assert_eq!(
        store
            .get::<i64>("balance:{acct}")
            .await
            .unwrap()
            .unwrap()
            .value,
        20
    );
}

#[tokio::test]
async fn the_same_token_writes_again_and_a_newer_one_passes() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut store = store(&server).await;
    let guard = c.lock("doc").fenced(true).acquire().await.unwrap();
    let fence = guard.fence().unwrap();
    for n in 0..3 {
        store
            .set("body:{doc}", format!("v{n}"), &fence)
            .await
            .unwrap();
    }
    guard.release().await.unwrap();
    let later = token(&c, "doc").await;
    store.set("body:{doc}", "v3", &later).await.unwrap();
    let stored: Stored<String> = store.get("body:{doc}").await.unwrap().unwrap();
    assert_eq!((stored.value.as_str(), stored.token), ("v3", later.token()));
}

/// Per key (no watermark), so that the tombstone alone refuses the stale writer.
#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_refuses_a_stale_writer_for_the_window() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let mut store = FencedStore::new(conn.clone(), WINDOW).per_key();
    let (old, new, newest) = (
        token(&c, "cart").await,
        token(&c, "cart").await,
        token(&c, "cart").await,
    );
    store.set("cart:1", "full", &old).await.unwrap();
    assert!(
        store.del("cart:1", &new).await.unwrap(),
        "a value was there"
    );
    assert_eq!(store.get::<String>("cart:1").await.unwrap(), None);
    let err = store.set("cart:1", "full again", &old).await.unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert_eq!(store.get::<String>("cart:1").await.unwrap(), None);
    // The tombstone expires after the store's window (bounded memory), and a newer holder
    // writes through it.
    let pttl: i64 = conn.pttl("cart:1").await.unwrap();
    let bound = WINDOW.as_millis() as i64;
    assert!(
        pttl > bound - 60_000 && pttl <= bound,
        "tombstone pttl {pttl}"
    );
    store.set("cart:1", "new", &newest).await.unwrap();
    let ttl: i64 = conn.pttl("cart:1").await.unwrap();
    assert_eq!(ttl, -1, "a set clears the tombstone's expiry, as SET does");
    // A delete of nothing still leaves its token behind.
    assert!(!store.del("cart:2", &new).await.unwrap());
    assert!(store
        .set("cart:2", "x", &old)
        .await
        .unwrap_err()
        .is_fenced());
}

/// Another lock's name whose watermark shares the hash slot of lock `name`'s: the one way a
/// store fenced per lock lets another lock reach a key carrying `{name}`.
fn another_lock_in_the_slot_of(name: &str) -> String {
    let slot = hash_slot(name.as_bytes());
    (0..)
        .map(|n| format!("other-{n}"))
        .find(|other| hash_slot(other.as_bytes()) == slot)
        .expect("some name shares the slot")
}

#[tokio::test]
async fn another_locks_key_or_a_plain_value_is_a_misuse_left_alone() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let mut store = store(&server).await;
    let mismatch = |result: Result<(), Error>, key: &str, lock: &str| match result {
        Err(Error::FenceMismatch {
            resource,
            lock: refused,
            fenced_by,
        }) => assert_eq!(
            (resource.as_str(), refused.as_str(), fenced_by.as_deref()),
            (key, lock, Some("a"))
        ),
        other => panic!("another lock's key: {other:?}"),
    };
    store
        .set("shared:{a}", "a's", &Fence::new("a", 5))
        .await
        .unwrap();
    // A lock whose name lies in the same slot reaches the key, and is refused: tokens of
    // different locks are never compared.
    let b = another_lock_in_the_slot_of("a");
    mismatch(
        store
            .set("shared:{a}", "b's", &Fence::new(b.as_str(), 1_000_000))
            .await,
        "shared:{a}",
        &b,
    );
    // So is any other lock through a store fenced per key (no watermark, no slot rule).
    let mut per_key = FencedStore::new(server.conn().await, WINDOW).per_key();
    mismatch(
        per_key
            .set("shared:{a}", "b's", &Fence::new("b", 1_000_000))
            .await,
        "shared:{a}",
        "b",
    );
    // Fenced per lock, a lock of another slot is refused before anything is sent.
    match store
        .set("shared:{a}", "b's", &Fence::new("b", 1_000_000))
        .await
    {
        Err(Error::FenceCrossSlot {
            resource,
            lock,
            watermark,
        }) => assert_eq!(
            (resource.as_str(), lock.as_str(), watermark.as_str()),
            ("shared:{a}", "b", "distlock:{b}:watermark")
        ),
        other => panic!("another slot's lock: {other:?}"),
    }
    let stored: Stored<String> = store.get("shared:{a}").await.unwrap().unwrap();
    assert_eq!((stored.value.as_str(), stored.token), ("a's", 5));

    let unfenced = |result: Result<_, Error>| {
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                Error::FenceMismatch {
                    fenced_by: None,
                    ..
                }
            ),
            "{err}"
        );
    };
    let _: () = conn.set("plain:{a}", "unfenced").await.unwrap();
    unfenced(
        store
            .set("plain:{a}", "x", &Fence::new("a", 5))
            .await
            .map(|()| false),
    );
    let _: () = conn.rpush("list:{a}", "item").await.unwrap();
    unfenced(store.del("list:{a}", &Fence::new("a", 5)).await);
    // A plain value at a key without the lock's tag: refused before the script could look.
    let _: () = conn.set("plain", "unfenced").await.unwrap();
    let untagged = store.set("plain", "x", &Fence::new("a", 5)).await;
    assert!(
        matches!(untagged, Err(Error::FenceCrossSlot { .. })),
        "{untagged:?}"
    );
    for key in ["plain:{a}", "plain"] {
        let plain: String = conn.get(key).await.unwrap();
        assert_eq!(plain, "unfenced", "{key}");
    }
    assert!(matches!(
        store.get::<String>("plain:{a}").await,
        Err(Error::Store { .. })
    ));
}

#[tokio::test]
async fn tokens_compare_as_u64_not_as_text_or_floats() {
    let server = RedisServer::start();
    let mut store = store(&server).await;
    let at = |t| Fence::new("n", t);
    store.set("k:{n}", "ten", &at(10)).await.unwrap();
    assert!(store
        .set("k:{n}", "nine", &at(9))
        .await
        .unwrap_err()
        .is_fenced());
    // Above 2^53, where Lua's numbers would call these two equal.
    let big = (1u64 << 53) + 1;
    store.set("k:{n}", "big", &at(big)).await.unwrap();
    assert!(store
        .set("k:{n}", "big-1", &at(big - 1))
        .await
        .unwrap_err()
        .is_fenced());
    store.set("k:{n}", "max", &at(u64::MAX)).await.unwrap();
    match store.set("k:{n}", "x", &at(u64::MAX - 1)).await {
        Err(Error::Fenced { seen, .. }) => assert_eq!(seen, u64::MAX),
        other => panic!("{other:?}"),
    }
}

/// A name's token sequence that restarts lower (its fence floor gone, a clock behind) is
/// refused, and the documented operator step moves the store forward.
#[tokio::test]
async fn a_sequence_restarted_lower_is_refused_until_the_operator_moves_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let mut store = store(&server).await;
    let written = token(&c, "restart").await;
    store
        .set("data:{restart}", "before", &written)
        .await
        .unwrap();
    // As if the floor were gone and the server's clock an hour behind.
    let lower = Fence::new("restart", written.token() - 3_600_000_000);
    let refused = store
        .set("data:{restart}", "after", &lower)
        .await
        .unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    // The operator, once the old holders are gone: `HSET key token 0` and, as the lock's
    // watermark holds the higher token too, `DEL <prefix>:{<name>}:watermark`.
    let _: () = conn.hset("data:{restart}", "token", 0).await.unwrap();
    let still = store
        .set("data:{restart}", "after", &lower)
        .await
        .unwrap_err();
    assert!(still.is_fenced(), "the watermark refuses it: {still}");
    let _: () = conn.del("distlock:{restart}:watermark").await.unwrap();
    store.set("data:{restart}", "after", &lower).await.unwrap();
    let stored: Stored<String> = store.get("data:{restart}").await.unwrap().unwrap();
    assert_eq!(
        (stored.value.as_str(), stored.token),
        ("after", lower.token())
    );
}

#[tokio::test]
async fn the_data_may_live_on_another_server_than_the_lock() {
    let locks = RedisServer::start();
    let data = RedisServer::start();
    let c = client(&locks).await;
    let mut store = store(&data).await;
    let (old, new) = (token(&c, "job").await, token(&c, "job").await);
    store.set("state:{job}", "new", &new).await.unwrap();
    assert!(store
        .set("state:{job}", "old", &old)
        .await
        .unwrap_err()
        .is_fenced());
}

#[tokio::test]
async fn fence_says_why_it_has_none() {
    let server = RedisServer::start();
    let c = client(&server).await;
    assert!(matches!(
        distlock::fence(),
        Err(Error::NotFenced { key: None })
    ));
    let unfenced = c
        .lock("plain")
        .run(async { distlock::fence() })
        .await
        .unwrap();
    match unfenced {
        Err(Error::NotFenced { key: Some(key) }) => assert_eq!(key, "plain"),
        other => panic!("{other:?}"),
    }
    let guard = c.lock("plain").acquire().await.unwrap();
    assert_eq!(guard.fence(), None);
    guard.release().await.unwrap();

    // A set: each lock its own fence, `fence()` the first lock's.
    let fences = c
        .lock_all(["b", "a"])
        .fenced(true)
        .run(async {
            (
                distlock::fence().unwrap(),
                distlock::fence_of("b").unwrap(),
                distlock::fence_of("c"),
            )
        })
        .await
        .unwrap();
    assert_eq!(fences.0.name(), "a");
    assert_eq!(fences.1.name(), "b");
    assert!(matches!(fences.2, Err(Error::NotFenced { key: None })));
}

#[tokio::test]
async fn a_re_entered_body_writes_with_its_outer_token() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut store = store(&server).await;
    let (outer, inner) = c
        .lock("ledger")
        .fenced(true)
        .run(async {
            let outer = distlock::fence().unwrap();
            store.set("total:{ledger}", 1, &outer).await.unwrap();
            let inner = c
                .lock("ledger")
                .fenced(true)
                .run(async {
                    let inner = distlock::fence().unwrap();
                    store.set("total:{ledger}", 2, &inner).await.unwrap();
                    inner
                })
                .await
                .unwrap();
            store.set("total:{ledger}", 3, &outer).await.unwrap();
            (outer, inner)
        })
        .await
        .unwrap();
    assert_eq!(outer, inner, "a re-entry shares its outer hold's token");
    let stored: Stored<i64> = store.get("total:{ledger}").await.unwrap().unwrap();
    assert_eq!((stored.value, stored.token), (3, outer.token()));
}

/// The attribute's `fenced`: the body writes twice through `distlock::fence()`.
#[distributed_lock(key = "counter:<id>", ttl = "5s", fenced, client = "fence-tests")]
async fn bump_twice(id: u64, url: String) -> Result<(u64, i64), Error> {
    let fence = distlock::fence()?;
    let conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut store = FencedStore::new(conn, WINDOW);
    let key = format!("value:{{counter:{id}}}"); // the lock's hash tag
    let mut value = 0;
    for _ in 0..2 {
        value = store
            .get::<i64>(&key)
            .await?
            .map_or(0, |stored| stored.value)
            + 1;
        store.set(&key, value, &fence).await?;
    }
    Ok((fence.token(), value))
}

#[tokio::test]
async fn an_annotated_body_writes_twice_with_its_token() {
    let server = RedisServer::start();
    Config::new(server.url())
        .install_as("fence-tests")
        .await
        .unwrap();
    let (first, value) = bump_twice(7, server.url()).await.unwrap();
    assert_eq!(value, 2);
    let (second, value) = bump_twice(7, server.url()).await.unwrap();
    assert!(second > first);
    assert_eq!(value, 4);
    // The first call's fence is stale now.
    let mut store = store(&server).await;
    let stale = Fence::new("counter:7", first);
    assert!(store
        .set("value:{counter:7}", 0, &stale)
        .await
        .unwrap_err()
        .is_fenced());
}

#[tokio::test]
async fn redlock_tokens_from_a_quorum_fence_the_same_way() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let c = Config::redlock(masters.iter().map(RedisServer::url))
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let data = RedisServer::start();
    let mut store = store(&data).await;
    let mut fences = Vec::new();
    for _ in 0..4 {
        fences.push(token(&c, "quorum").await);
    }
    for pair in fences.windows(2) {
        assert!(pair[1].token() > pair[0].token(), "{fences:?}");
    }
    let newest = fences.last().unwrap();
    store.set("data:{quorum}", "newest", newest).await.unwrap();
    for stale in &fences[..3] {
        assert!(store
            .set("data:{quorum}", "stale", stale)
            .await
            .unwrap_err()
            .is_fenced());
    }
}
