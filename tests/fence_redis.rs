//! Fenced writes to the user's own Redis data (`distlock::fence::redis`) against real
//! redis-servers: a stale holder's `set` and `del` are refused and change nothing, the same
//! token writes as often as it likes (a body that writes twice, a re-entered body), a delete's
//! tombstone keeps a stale holder from writing the value back, a key written under another lock
//! (or holding a plain value) is a misuse, tokens compare exactly as `u64`s, the data may live on
//! another server than the lock or in a Redis Cluster, and `distlock::fence()` says why it has
//! no fence to give.

use std::time::Duration;

use distlock::fence::redis::{del, get, set, Stored, TOMBSTONE_TTL};
use distlock::{distributed_lock, Client, Config, Error, Fence};
use redis::AsyncCommands;
use testkit::{RedisCluster, RedisServer};

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
    let mut conn = server.conn().await;
    let (old, new) = (token(&c, "acct").await, token(&c, "acct").await);
    assert!(new.token() > old.token());

    set(&mut conn, "balance", 10, &old).await.unwrap();
    set(&mut conn, "balance", 20, &new).await.unwrap();
    match set(&mut conn, "balance", 99, &old).await {
        Err(Error::Fenced {
            resource,
            token,
            seen,
        }) => {
            assert_eq!(resource, "balance");
            assert_eq!((token, seen), (old.token(), new.token()));
        }
        other => panic!("a stale set: {other:?}"),
    }
    let stored: Stored<i64> = get(&mut conn, "balance").await.unwrap().unwrap();
    assert_eq!(
        (stored.value, stored.token, stored.lock.as_str()),
        (20, new.token(), "acct")
    );
    // A stale delete is refused too.
    assert!(del(&mut conn, "balance", &old)
        .await
        .unwrap_err()
        .is_fenced());
    assert_eq!(
        get::<i64, _>(&mut conn, "balance")
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
    let mut conn = server.conn().await;
    let guard = c.lock("doc").fenced(true).acquire().await.unwrap();
    let fence = guard.fence().unwrap();
    for n in 0..3 {
        set(&mut conn, "doc:body", format!("v{n}"), &fence)
            .await
            .unwrap();
    }
    guard.release().await.unwrap();
    let later = token(&c, "doc").await;
    set(&mut conn, "doc:body", "v3", &later).await.unwrap();
    let stored: Stored<String> = get(&mut conn, "doc:body").await.unwrap().unwrap();
    assert_eq!((stored.value.as_str(), stored.token), ("v3", later.token()));
}

#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_refuses_a_stale_writer() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let (old, new, newest) = (
        token(&c, "cart").await,
        token(&c, "cart").await,
        token(&c, "cart").await,
    );
    set(&mut conn, "cart:1", "full", &old).await.unwrap();
    assert!(
        del(&mut conn, "cart:1", &new).await.unwrap(),
        "a value was there"
    );
    assert_eq!(get::<String, _>(&mut conn, "cart:1").await.unwrap(), None);
    let err = set(&mut conn, "cart:1", "full again", &old)
        .await
        .unwrap_err();
    assert!(err.is_fenced(), "{err}");
    assert_eq!(get::<String, _>(&mut conn, "cart:1").await.unwrap(), None);
    // The tombstone expires (bounded memory), and a newer holder writes through it.
    let pttl: i64 = conn.pttl("cart:1").await.unwrap();
    let bound = TOMBSTONE_TTL.as_millis() as i64;
    assert!(
        pttl > bound - 60_000 && pttl <= bound,
        "tombstone pttl {pttl}"
    );
    set(&mut conn, "cart:1", "new", &newest).await.unwrap();
    let ttl: i64 = conn.pttl("cart:1").await.unwrap();
    assert_eq!(ttl, -1, "a set clears the tombstone's expiry, as SET does");
    // A delete of nothing still leaves its token behind.
    assert!(!del(&mut conn, "cart:2", &new).await.unwrap());
    assert!(set(&mut conn, "cart:2", "x", &old)
        .await
        .unwrap_err()
        .is_fenced());
}

#[tokio::test]
async fn another_locks_key_or_a_plain_value_is_a_misuse_left_alone() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    set(&mut conn, "shared", "a's", &Fence::new("a", 5))
        .await
        .unwrap();
    match set(&mut conn, "shared", "b's", &Fence::new("b", 1_000_000)).await {
        Err(Error::FenceMismatch {
            resource,
            lock,
            fenced_by,
        }) => {
            assert_eq!(
                (resource.as_str(), lock.as_str(), fenced_by.as_deref()),
                ("shared", "b", Some("a"))
            );
        }
        other => panic!("another lock's key: {other:?}"),
    }
    let stored: Stored<String> = get(&mut conn, "shared").await.unwrap().unwrap();
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
    let _: () = conn.set("plain", "unfenced").await.unwrap();
    unfenced(
        set(&mut conn, "plain", "x", &Fence::new("a", 5))
            .await
            .map(|()| false),
    );
    let _: () = conn.rpush("list", "item").await.unwrap();
    unfenced(del(&mut conn, "list", &Fence::new("a", 5)).await);
    let plain: String = conn.get("plain").await.unwrap();
    assert_eq!(plain, "unfenced");
    assert!(matches!(
        get::<String, _>(&mut conn, "plain").await,
        Err(Error::Store { .. })
    ));
}

#[tokio::test]
async fn tokens_compare_as_u64_not_as_text_or_floats() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let at = |t| Fence::new("n", t);
    set(&mut conn, "k", "ten", &at(10)).await.unwrap();
    assert!(set(&mut conn, "k", "nine", &at(9))
        .await
        .unwrap_err()
        .is_fenced());
    // Above 2^53, where Lua's numbers would call these two equal.
    let big = (1u64 << 53) + 1;
    set(&mut conn, "k", "big", &at(big)).await.unwrap();
    assert!(set(&mut conn, "k", "big-1", &at(big - 1))
        .await
        .unwrap_err()
        .is_fenced());
    set(&mut conn, "k", "max", &at(u64::MAX)).await.unwrap();
    match set(&mut conn, "k", "x", &at(u64::MAX - 1)).await {
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
    let written = token(&c, "restart").await;
    set(&mut conn, "restart:data", "before", &written)
        .await
        .unwrap();
    // As if the floor were gone and the server's clock an hour behind.
    let lower = Fence::new("restart", written.token() - 3_600_000_000);
    let refused = set(&mut conn, "restart:data", "after", &lower)
        .await
        .unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    // The operator, once the old holders are gone: `HSET key token 0`.
    let _: () = conn.hset("restart:data", "token", 0).await.unwrap();
    set(&mut conn, "restart:data", "after", &lower)
        .await
        .unwrap();
    let stored: Stored<String> = get(&mut conn, "restart:data").await.unwrap().unwrap();
    assert_eq!(
        (stored.value.as_str(), stored.token),
        ("after", lower.token())
    );
}

#[tokio::test]
async fn the_data_may_live_on_another_server_or_in_a_cluster() {
    let locks = RedisServer::start();
    let data = RedisServer::start();
    let c = client(&locks).await;
    let mut conn = data.conn().await;
    let (old, new) = (token(&c, "job").await, token(&c, "job").await);
    set(&mut conn, "job:state", "new", &new).await.unwrap();
    assert!(set(&mut conn, "job:state", "old", &old)
        .await
        .unwrap_err()
        .is_fenced());

    let cluster = RedisCluster::start(3, 0);
    let mut conn = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    // Keys in every master's slots: the token is in the value's own key.
    for n in 0..12 {
        let key = format!("item:{n}");
        set(&mut conn, &key, n, &old).await.unwrap();
        set(&mut conn, &key, n + 1, &new).await.unwrap();
        assert!(set(&mut conn, &key, 0, &old).await.unwrap_err().is_fenced());
        let stored: Stored<i64> = get(&mut conn, &key).await.unwrap().unwrap();
        assert_eq!((stored.value, stored.token), (n + 1, new.token()));
        assert!(del(&mut conn, &key, &new).await.unwrap());
    }
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
    let mut conn = server.conn().await;
    let (outer, inner) = c
        .lock("ledger")
        .fenced(true)
        .run(async {
            let outer = distlock::fence().unwrap();
            set(&mut conn, "ledger:total", 1, &outer).await.unwrap();
            let inner = c
                .lock("ledger")
                .fenced(true)
                .run(async {
                    let inner = distlock::fence().unwrap();
                    set(&mut conn, "ledger:total", 2, &inner).await.unwrap();
                    inner
                })
                .await
                .unwrap();
            set(&mut conn, "ledger:total", 3, &outer).await.unwrap();
            (outer, inner)
        })
        .await
        .unwrap();
    assert_eq!(outer, inner, "a re-entry shares its outer hold's token");
    let stored: Stored<i64> = get(&mut conn, "ledger:total").await.unwrap().unwrap();
    assert_eq!((stored.value, stored.token), (3, outer.token()));
}

/// The attribute's `fenced`: the body writes twice through `distlock::fence()`.
#[distributed_lock(key = "counter:<id>", ttl = "5s", fenced, client = "fence-tests")]
async fn bump_twice(id: u64, url: String) -> Result<(u64, i64), Error> {
    let fence = distlock::fence()?;
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let key = format!("counter:{id}");
    let mut value = 0;
    for _ in 0..2 {
        value = get::<i64, _>(&mut conn, &key)
            .await?
            .map_or(0, |stored| stored.value)
            + 1;
        set(&mut conn, &key, value, &fence).await?;
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
    let mut conn = server.conn().await;
    let stale = Fence::new("counter:7", first);
    assert!(set(&mut conn, "counter:7", 0, &stale)
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
    let mut conn = data.conn().await;
    let mut fences = Vec::new();
    for _ in 0..4 {
        fences.push(token(&c, "quorum").await);
    }
    for pair in fences.windows(2) {
        assert!(pair[1].token() > pair[0].token(), "{fences:?}");
    }
    let newest = fences.last().unwrap();
    set(&mut conn, "quorum:data", "newest", newest)
        .await
        .unwrap();
    for stale in &fences[..3] {
        assert!(set(&mut conn, "quorum:data", "stale", stale)
            .await
            .unwrap_err()
            .is_fenced());
    }
}
