//! distlock-core under faults against a real redis-server: cancelled acquires and dropped
//! guards leave nothing behind, a paused server times out, an unreachable one loses held
//! locks, the client reconnects after a restart and reloads flushed scripts.

use std::time::Duration;

use distlock::{Error, LossReason};
use testkit::{
    acquire_soon, command_calls, eventually, lock_keys, pubsub_channels as channels,
    quick_client as client, take_and_release, RedisServer,
};
use tokio::time::Instant;

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
