//! distlock-core semantics against a real redis-server: ownership, ttl, re-entry, fencing, key
//! layout, replayed requests, other protocols, `min_hold`. Renewal and loss, waiting, and
//! faults have their own files (`core_renewal`, `core_waiting`, `core_faults`).

use std::time::Duration;

use distlock::{Config, Error, HeldBy};
use redis::AsyncCommands;
use testkit::{
    all_keys, command_calls, lock_keys, quick_client as client, take_and_release, RedisServer,
    ServerOptions,
};
use tokio::time::Instant;

#[tokio::test]
async fn acquire_is_exclusive_and_release_frees() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;

    let (sets, scripts) = (
        command_calls(&mut conn, "set").await,
        command_calls(&mut conn, "evalsha").await,
    );
    let guard = a
        .lock("order:1")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    // One `SET NX PX GET` set owner and ttl together: no script, no SETNX, no separate EXPIRE.
    assert_eq!(command_calls(&mut conn, "set").await - sets, 1);
    assert_eq!(command_calls(&mut conn, "evalsha").await - scripts, 0);
    assert_eq!(command_calls(&mut conn, "setnx").await, 0);
    let pttl: i64 = conn.pttl("distlock:{order:1}").await.unwrap();
    assert!((1..=5000).contains(&pttl), "pttl {pttl}");

    let busy = b.lock("order:1").acquire().await.unwrap_err();
    assert!(
        matches!(&busy, Error::Busy { key, held_by: HeldBy::Owner, .. } if key == "order:1"),
        "{busy}"
    );
    assert_eq!(
        busy.to_string(),
        "lock `order:1` is busy: another owner holds it (set `wait` to wait for a release, or retry later)"
    );
    // A different name is independent.
    take_and_release(&b, "order:2").await;

    guard.release().await.unwrap();
    assert!(lock_keys(&mut conn).await.is_empty());
    take_and_release(&b, "order:1").await;
}

#[tokio::test]
async fn non_owner_release_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let stale = a
        .lock("k")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    // The lease "expires" and someone else takes the lock.
    let _: () = conn.del("distlock:{k}").await.unwrap();
    let current = b
        .lock("k")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let owner_before: String = conn.get("distlock:{k}").await.unwrap();
    assert!(
        owner_before.starts_with("d2:"),
        "a versioned value: {owner_before}"
    );

    let err = stale.release().await.unwrap_err();
    assert!(
        matches!(&err, Error::NotOwner { key } if key == "k"),
        "{err}"
    );
    let owner_after: String = conn.get("distlock:{k}").await.unwrap();
    assert_eq!(owner_before, owner_after);
    assert_eq!(current.token(), None, "tokens only for fenced locks");
    current.release().await.unwrap();
}

#[tokio::test]
async fn reentry_counts_holds_and_shares_the_token() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let c2 = c.clone();
    let outer = c
        .lock("re")
        .fenced(true)
        .run(async move {
            let outer_token = distlock::fencing_token().expect("inside a fenced locked body");
            let mut conn = redis::Client::open(c2.config().redacted_url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let value_before: String = conn.get("distlock:{re}").await.unwrap();
            let inner = c2
                .lock("re")
                .acquire()
                .await
                .expect("re-entry, not deadlock");
            assert!(inner.is_reentry());
            assert_eq!(inner.token(), Some(outer_token));
            // Holds are counted on the client: Redis still holds the one value.
            let value: String = conn.get("distlock:{re}").await.unwrap();
            assert_eq!(value, value_before);
            inner.release().await.unwrap();
            let still: bool = conn.exists("distlock:{re}").await.unwrap();
            assert!(still, "outer hold keeps the lock");
            // A spawned task is a different owner: it must not re-enter.
            let c3 = c2.clone();
            let spawned = tokio::spawn(async move { c3.lock("re").acquire().await.map(|_| ()) });
            assert!(spawned.await.unwrap().unwrap_err().is_busy());
            outer_token
        })
        .await
        .unwrap();
    assert!(outer > 0);
    // `run` sent the release without waiting: another connection sees it once it is answered.
    c.settle().await;
    assert!(lock_keys(&mut conn).await.is_empty());
    assert_eq!(distlock::fencing_token(), None);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_with_bounded_memory() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let fenced = |name: &str| c.lock(name).fenced(true).acquire();
    let mut last = 0;
    for i in 0..50 {
        if i == 25 {
            // The per-name floor expires after the retention time; tokens keep increasing.
            let _: () = conn.del("distlock:{fence}:fence").await.unwrap();
        }
        let g = fenced("fence").await.unwrap();
        let token = g.token().expect("a fenced lock has a token");
        assert!(token > last, "token {token} after {last}");
        last = token;
        g.release().await.unwrap();
    }
    // A server clock that stepped back is covered by the floor: tokens still increase.
    let ahead: u64 = 4_000_000_000_000_000;
    let _: () = conn.set("distlock:{fence}:fence", ahead).await.unwrap();
    let g = fenced("fence").await.unwrap();
    assert_eq!(g.token(), Some(ahead + 1));
    g.release().await.unwrap();
    let g = fenced("fence").await.unwrap();
    assert_eq!(g.token(), Some(ahead + 2));
    g.release().await.unwrap();
    // The floor key expires (bounded memory for high-cardinality names).
    let pttl: i64 = conn.pttl("distlock:{fence}:fence").await.unwrap();
    assert!(
        pttl > 0 && pttl <= 600_000,
        "fence key must expire, pttl {pttl}"
    );
    // Acquire through a client with a short retention: the floor key lives max(ttl, retention).
    let short = Config::new(server.url())
        .fence_retention(Duration::from_millis(50))
        .connect()
        .await
        .unwrap();
    let g = short
        .lock("f2")
        .ttl(Duration::from_secs(2))
        .fenced(true)
        .acquire()
        .await
        .unwrap();
    let pttl: i64 = conn.pttl("distlock:{f2}:fence").await.unwrap();
    assert!(
        pttl > 1000 && pttl <= 2000,
        "retention is at least the ttl, pttl {pttl}"
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn all_keys_of_a_lock_share_one_cluster_slot() {
    let server = RedisServer::start_with(ServerOptions {
        cluster: true,
        ..Default::default()
    });
    let mut conn = server.conn().await;
    // The names are checked before anything is sent; the client is a plain server's (a
    // cluster-enabled node given as one server fails at connect).
    let plain = RedisServer::start();
    let c = client(&plain).await;
    let names = [
        "order:42",
        "a:b:c",
        "x",
        "ünï:cødé",
        "with space",
        "%7B",
        "{",
        "a}b",
    ];
    for name in names {
        let lock = format!("distlock:{{{name}}}");
        let keys = [
            lock.clone(),
            format!("{lock}:fence"),
            format!("{lock}:released"),
        ];
        if name.contains(['{', '}']) {
            // Such names are refused rather than allowed to move the slot.
            let err = c.lock(name).acquire().await.unwrap_err();
            assert!(matches!(err, Error::InvalidKey { .. }), "{name}: {err}");
            continue;
        }
        let mut slots = Vec::new();
        for key in &keys {
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(slot, distlock::hash_slot(key.as_bytes()), "{key}");
            slots.push(slot);
        }
        assert!(slots.iter().all(|&s| s == slots[0]), "{name}: {slots:?}");
        let name_slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(name)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(slots[0], name_slot, "the slot is the name's own slot");
    }
}

#[tokio::test]
async fn invalid_keys_are_typed_errors() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for bad in [
        String::new(),
        "x".repeat(distlock::MAX_NAME_LEN + 1),
        "a{b}".into(),
    ] {
        let err = c.lock(bad.clone()).acquire().await.unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }), "{bad:.20}: {err}");
    }
    let mut conn = server.conn().await;
    // Only the client's identity record (written at connect): no lock or fence key.
    let keys = all_keys(&mut conn).await;
    assert!(
        keys.iter().all(|k| k.starts_with("distlock:client:")),
        "{keys:?}"
    );
}

#[tokio::test]
async fn replayed_requests_change_nothing_and_echo_their_request() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let shared = conn.clone();
    let acquire = redis::Script::new(distlock::scripts::ACQUIRE_FENCED);
    let release = redis::Script::new(distlock::scripts::RELEASE);
    let run_acquire = |value: &'static str, id: &'static str| {
        let mut conn = shared.clone();
        let acquire = acquire.clone();
        async move {
            let reply: (String, (i64, i64)) = acquire
                .key("distlock:{r}")
                .key("distlock:{r}:fence")
                .arg(value)
                .arg(5000)
                .arg(60000)
                .arg(id)
                .invoke_async(&mut conn)
                .await
                .unwrap();
            reply
        }
    };
    let (echo, (status, token)) = run_acquire("d2:owner-1", "r1").await;
    assert_eq!((echo.as_str(), status), ("r1", 1));
    // The same request again (its reply was lost): still ours, the same token.
    assert_eq!(
        run_acquire("d2:owner-1", "r2").await,
        ("r2".to_owned(), (1, token))
    );
    // Another owner is told it is busy, with the remaining ttl.
    let (_, (status, pttl)) = run_acquire("d2:owner-2", "r3").await;
    assert_eq!(status, 0);
    assert!(pttl > 0 && pttl <= 5000, "{pttl}");
    // The plain acquire: `SET NX PX GET` reads back our own value on a replay.
    let replay: Option<String> = redis::cmd("SET")
        .arg("distlock:{r}")
        .arg("d2:owner-1")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .arg("GET")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(replay.as_deref(), Some("d2:owner-1"));

    let run_release = |value: &'static str, id: &'static str| {
        let mut conn = shared.clone();
        let release = release.clone();
        async move {
            let reply: (String, i64) = release
                .key("distlock:{r}")
                .key("distlock:{r}:released")
                .arg(value)
                .arg(id)
                .arg(0)
                .invoke_async(&mut conn)
                .await
                .unwrap();
            reply
        }
    };
    assert_eq!(
        run_release("d2:owner-2", "r4").await,
        ("r4".to_owned(), -1),
        "another owner's release changes nothing"
    );
    assert_eq!(run_release("d2:owner-1", "r5").await, ("r5".to_owned(), 0));
    assert_eq!(
        run_release("d2:owner-1", "r6").await,
        ("r6".to_owned(), -2),
        "a replay finds no lock"
    );
    let exists: bool = conn.exists("distlock:{r}").await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn a_lock_of_another_protocol_is_never_misread() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    // A lock as distlock's first protocol wrote it (a hash), and a foreign string.
    let _: () = conn
        .hset_multiple("distlock:{old}", &[("o", "owner"), ("f", "1"), ("h1", "1")])
        .await
        .unwrap();
    let _: () = conn.set("distlock:{foreign}", "someone").await.unwrap();
    for name in ["old", "foreign"] {
        for fenced in [false, true] {
            let err = c.lock(name).fenced(fenced).acquire().await.unwrap_err();
            assert!(
                matches!(&err, Error::Incompatible { key } if key == name),
                "{name} (fenced: {fenced}): {err}"
            );
        }
    }
    // Nothing was changed.
    let fields: usize = conn.hlen("distlock:{old}").await.unwrap();
    assert_eq!(fields, 3);
    let foreign: String = conn.get("distlock:{foreign}").await.unwrap();
    assert_eq!(foreign, "someone");
}

#[tokio::test]
async fn min_hold_keeps_an_early_released_lock_until_the_minimum() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let started = Instant::now();
    let g = a
        .lock("job")
        .ttl(Duration::from_secs(5))
        .min_hold(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    g.release().await.unwrap();
    // Released early: still taken, expiring when the minimum hold is reached.
    let pttl: i64 = conn.pttl("distlock:{job}").await.unwrap();
    assert!(
        pttl > 0 && pttl <= 600,
        "kept for the rest of min_hold: {pttl}"
    );
    assert!(b.lock("job").acquire().await.unwrap_err().is_busy());
    // A waiter takes it once the minimum has passed (no release message: the ttl re-check).
    let g = b
        .lock("job")
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    let at = started.elapsed();
    assert!(
        at >= Duration::from_millis(550),
        "not before min_hold: {at:?}"
    );
    assert!(
        at < Duration::from_millis(1500),
        "soon after min_hold: {at:?}"
    );
    g.release().await.unwrap();
    // Past the minimum, release deletes at once.
    let g = a
        .lock("late")
        .min_hold(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.release().await.unwrap();
    assert!(lock_keys(&mut conn).await.is_empty());
}
