//! distlock-core semantics against a real redis-server: ownership, ttl, re-entry, renewal,
//! loss, waiting, fencing, key layout, cancellation, timeouts, reconnection, scripts.

use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Config, Error, LossReason};
use redis::AsyncCommands;
use testkit::{all_keys, command_calls, eventually, lock_keys, RedisServer, ServerOptions};
use tokio::time::Instant;

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url())
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// Channels subscribed on the server (`PUBSUB CHANNELS`).
async fn channels(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(conn)
        .await
        .unwrap()
}

/// Takes `name` at once and releases it (the lock must be free).
async fn take_and_release(c: &Client, name: &str) {
    c.lock(name)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Acquires `name` once the server answers again (after a fault), within 5 s.
async fn acquire_soon(c: &Client, name: &str, what: &str) -> distlock::LockGuard {
    eventually(Duration::from_secs(5), what, || {
        let c = c.clone();
        let name = name.to_owned();
        async move { c.lock(name).acquire().await.ok() }
    })
    .await
}

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
        matches!(&busy, Error::Busy { key, .. } if key == "order:1"),
        "{busy}"
    );
    assert!(busy.to_string().contains("order:1"));
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
    let c = client(&server).await;
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
async fn watchdog_keeps_the_lock_and_stops_on_release() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let ttl = Duration::from_millis(300);
    let guard = a.lock("long").ttl(ttl).renew(true).acquire().await.unwrap();
    let until = Instant::now() + ttl * 5;
    while Instant::now() < until {
        assert!(b.lock("long").acquire().await.unwrap_err().is_busy());
        tokio::time::sleep(ttl / 4).await;
    }
    assert!(guard.lost_reason().is_none());
    assert_eq!(a.renewing(), 1);
    guard.release().await.unwrap();
    assert_eq!(a.renewing(), 0);
    // No renewal traffic after release: nothing calls EVALSHA for a few ttl periods.
    let calls = command_calls(&mut conn, "evalsha").await;
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(command_calls(&mut conn, "evalsha").await, calls);
    take_and_release(&b, "long").await;
}

#[tokio::test]
async fn renewal_is_batched() {
    let server = RedisServer::start();
    let c = Config::new(server.url())
        .renew_batch_size(100)
        .connect()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    let ttl = Duration::from_millis(600);
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(
            c.lock(format!("batch:{i}"))
                .ttl(ttl)
                .renew(true)
                .acquire()
                .await
                .unwrap(),
        );
    }
    let before = command_calls(&mut conn, "evalsha").await;
    let window = Duration::from_secs(2);
    tokio::time::sleep(window).await;
    let renew_calls = command_calls(&mut conn, "evalsha").await - before;
    // Unbatched: 300 locks × (2 s / 200 ms) = 3000 calls. Batched: ~3 per tick.
    assert!(
        renew_calls <= 90,
        "{renew_calls} renewal calls for 300 locks"
    );
    assert!(renew_calls >= 9, "renewal must happen: {renew_calls}");
    for g in &guards {
        assert!(g.lost_reason().is_none());
    }
    let min_pttl: i64 = {
        let mut min = i64::MAX;
        for i in 0..300 {
            let p: i64 = conn.pttl(format!("distlock:{{batch:{i}}}")).await.unwrap();
            min = min.min(p);
        }
        min
    };
    assert!(min_pttl > 0, "every lease still alive");
    drop(guards);
    eventually(Duration::from_secs(5), "all locks released", || {
        let mut conn = conn.clone();
        async move { lock_keys(&mut conn).await.is_empty().then_some(()) }
    })
    .await;
    assert_eq!(c.renewing(), 0);
}

#[tokio::test]
async fn loss_is_detected_within_one_renewal_interval() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let ttl = Duration::from_millis(600);

    let guard = a.lock("gone").ttl(ttl).renew(true).acquire().await.unwrap();
    let _: () = conn.del("distlock:{gone}").await.unwrap();
    let deleted = Instant::now();
    let reason = tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("loss detected");
    assert_eq!(reason, LossReason::Expired);
    assert!(deleted.elapsed() <= ttl / 3 + Duration::from_millis(150));
    assert!(matches!(guard.ensure_held(), Err(Error::Lost { .. })));
    drop(guard);

    let guard = a
        .lock("taken")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    let _: () = conn.del("distlock:{taken}").await.unwrap();
    let thief = b
        .lock("taken")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let reason = tokio::time::timeout(ttl, guard.lost())
        .await
        .expect("loss detected");
    assert_eq!(reason, LossReason::Stolen);
    // The loss was known before the release: the release says so (and changes nothing).
    let error = guard.release().await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::Lost {
                reason: LossReason::Stolen,
                ..
            }
        ),
        "{error}"
    );
    assert!(thief.ensure_held().is_ok());
    thief.release().await.unwrap();

    // Without renewal the lease simply elapses.
    let short = a
        .lock("short")
        .ttl(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(short.lost().await, LossReason::LeaseElapsed);
    assert!(started.elapsed() <= Duration::from_millis(500));
}

#[tokio::test]
async fn run_cancels_the_body_when_the_lease_is_lost() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = finished.clone();
    let started = Instant::now();
    let err = c
        .lock("body")
        .ttl(Duration::from_millis(200))
        .run(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                reason: LossReason::LeaseElapsed,
                ..
            }
        ),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        !finished.load(std::sync::atomic::Ordering::SeqCst),
        "body was cancelled"
    );
}

#[tokio::test]
async fn waiters_are_woken_by_release_not_by_polling() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let holder = a
        .lock("w")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let started = Instant::now();
            let g = b
                .lock("w")
                .wait(Duration::from_secs(5))
                .acquire()
                .await
                .unwrap();
            let waited = started.elapsed();
            g.release().await.unwrap();
            waited
        }
    });
    // The waiter is subscribed once its channel shows up on the server.
    eventually(Duration::from_secs(5), "waiter subscribed", || {
        let mut conn = conn.clone();
        async move {
            let chans = channels(&mut conn).await;
            (chans == ["distlock:{w}:released"]).then_some(())
        }
    })
    .await;
    let evalsha_before = command_calls(&mut conn, "evalsha").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Waiting costs no round trips (no polling) while the holder's lease is long.
    assert_eq!(command_calls(&mut conn, "evalsha").await, evalsha_before);
    let released = Instant::now();
    holder.release().await.unwrap();
    let waited = waiter.await.unwrap();
    assert!(waited >= Duration::from_millis(300));
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "woken by the release message"
    );
    // Nobody waits: no subscription is left, on the server or in the client (which forgets
    // the channel once its UNSUBSCRIBE is answered, a moment after the server dropped it).
    eventually(Duration::from_secs(5), "subscriptions removed", || {
        let (mut conn, b) = (conn.clone(), b.clone());
        async move {
            let chans = channels(&mut conn).await;
            (chans.is_empty() && b.waiting_channels() == 0).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn waiter_takes_over_from_a_crashed_holder_at_its_ttl() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    // A holder that crashed: its lock exists with 400 ms left and it will never publish.
    let _: () = redis::pipe()
        .set("distlock:{crash}", "d2:dead-owner")
        .pexpire("distlock:{crash}", 400)
        .query_async(&mut conn)
        .await
        .unwrap();
    let started = Instant::now();
    let g = c
        .lock("crash")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "not before the lease ran out: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1500),
        "re-checked at the holder's ttl: {waited:?}"
    );
    g.release().await.unwrap();

    // And `wait` gives up with Busy when the holder outlives it.
    let _holder = c
        .lock("held")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let other = client(&server).await;
    let started = Instant::now();
    let err = other
        .lock("held")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Busy { waited, .. } if waited >= Duration::from_millis(300)));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_and_dropped_guards_leave_nothing_behind() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let mut tasks = Vec::new();
    for i in 0..300u64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("cancel:{}", i % 20);
            let acquire = c
                .lock(name)
                .ttl(Duration::from_secs(30))
                .renew(i % 2 == 0)
                .wait(Duration::from_secs(5))
                .acquire();
            // Cancel at varied points: before sending, in flight, or while waiting.
            match tokio::time::timeout(Duration::from_micros(50 * (i % 40)), acquire).await {
                Ok(Ok(guard)) => {
                    if i % 3 == 0 {
                        drop(guard); // dropped without release()
                    } else {
                        let _ = guard.release().await;
                    }
                }
                Ok(Err(e)) => panic!("unexpected error {e}"),
                Err(_) => {}
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    eventually(
        Duration::from_secs(5),
        "background cleanup finished",
        || {
            let c = c.clone();
            async move { (c.background_tasks() == 0).then_some(()) }
        },
    )
    .await;
    assert!(lock_keys(&mut conn).await.is_empty(), "no lock keys remain");
    assert_eq!(c.renewing(), 0, "no renewal continues");
    let chans = channels(&mut conn).await;
    assert!(chans.is_empty(), "no subscriptions remain: {chans:?}");
    let calls = command_calls(&mut conn, "evalsha").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        command_calls(&mut conn, "evalsha").await,
        calls,
        "no traffic at rest"
    );
}

#[tokio::test]
async fn a_paused_server_times_out_instead_of_hanging() {
    let server = RedisServer::start();
    let c = client(&server).await; // response timeout 500 ms
    let held = c
        .lock("p")
        .ttl(Duration::from_millis(900))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    server.pause();
    let started = Instant::now();
    let err = c.lock("q").acquire().await.unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(
        took < Duration::from_millis(1000),
        "bounded by the response timeout: {took:?}"
    );
    assert!(err.is_transient());
    drop(held);
    // Works again after the pause.
    acquire_soon(&c, "q", "server answers again")
        .await
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn held_lock_is_lost_when_redis_is_unreachable() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let ttl = Duration::from_millis(900);
    let held = c.lock("p").ttl(ttl).renew(true).acquire().await.unwrap();
    server.pause();
    let reason = tokio::time::timeout(ttl * 2, held.lost())
        .await
        .expect("loss reported");
    server.resume();
    assert_eq!(reason, LossReason::Unreachable);
}

#[tokio::test]
async fn reconnects_after_restart_without_reinit() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    let held = c
        .lock("r")
        .ttl(Duration::from_millis(900))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    server.kill();
    let err = c.lock("x").acquire().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    server.restart();
    // The held lock vanished with the server's data: reported lost.
    let reason = tokio::time::timeout(Duration::from_secs(3), held.lost())
        .await
        .expect("loss reported");
    assert!(
        matches!(reason, LossReason::Expired | LossReason::Unreachable),
        "{reason:?}"
    );
    let g = acquire_soon(&c, "x", "acquire after restart").await;
    g.release().await.unwrap();
}

#[tokio::test]
async fn scripts_reload_after_script_flush_and_client_kill() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    take_and_release(&c, "s").await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    take_and_release(&c, "s").await;
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut conn)
        .await
        .unwrap();
    let g = acquire_soon(&c, "s", "acquire after CLIENT KILL").await;
    g.release().await.unwrap();
}

#[tokio::test]
async fn hold_cap_stops_renewal_and_the_lease_elapses() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let started = Instant::now();
    let g = c
        .lock("capped")
        .ttl(Duration::from_millis(300))
        .renew(true)
        .max_hold(Duration::from_millis(700))
        .acquire()
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("lease ends after the cap");
    let held = started.elapsed();
    assert_eq!(reason, LossReason::LeaseElapsed);
    assert!(
        held >= Duration::from_millis(650),
        "renewed up to the cap: {held:?}"
    );
    assert!(
        held < Duration::from_millis(1200),
        "not renewed past the cap: {held:?}"
    );
    // Redis agrees: the key expired.
    let mut conn = server.conn().await;
    eventually(Duration::from_secs(2), "key expired", || {
        let mut conn = conn.clone();
        async move { lock_keys(&mut conn).await.is_empty().then_some(()) }
    })
    .await;
    assert!(lock_keys(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_take_turns() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let (c, order) = (c.clone(), order.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    let g = c
                        .lock("fair")
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await
                        .unwrap();
                    order.lock().unwrap().push(task);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    g.release().await.unwrap();
                }
            })
        })
        .collect();
    let before = command_calls(&mut conn, "evalsha").await;
    for t in tasks {
        t.await.unwrap();
    }
    let attempts = command_calls(&mut conn, "evalsha").await - before;
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 80);
    let longest_run = order
        .chunk_by(|a, b| a == b)
        .map(<[usize]>::len)
        .max()
        .unwrap();
    assert!(
        longest_run <= 3,
        "a releasing task queues behind waiters: {order:?}"
    );
    // 80 acquisitions + 80 releases; without turn-taking every release wakes all 7 waiters.
    assert!(attempts < 80 * 2 + 80 * 3, "{attempts} script calls");
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
