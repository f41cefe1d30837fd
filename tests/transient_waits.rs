//! A waiting acquire (`wait(d)`) survives transient failures (issue 19, item 4): connection
//! resets, a server that answers `READONLY` for a while (a failover), and it ends with the last
//! transient error, typed, once its wait runs out with Redis unreachable. Faults come from
//! `testkit::proxy` in front of a real server, or from the server itself.

use std::time::Duration;

use distlock::Error;
use testkit::proxy::{Proxy, ReplyFault};
use testkit::{client_with as client, eventually, RedisServer};
use tokio::time::Instant;

/// The plain acquire's `SET <lock> <value> NX PX <ms> GET` (the first command of its pipeline).
fn is_acquire(args: &[Vec<u8>]) -> bool {
    let has = |word: &[u8]| args[3..].iter().any(|a| a.eq_ignore_ascii_case(word));
    args.len() > 3 && args[0].eq_ignore_ascii_case(b"SET") && has(b"NX") && has(b"GET")
}

#[tokio::test]
async fn a_wait_survives_connection_resets_and_takes_the_lock_when_released() {
    let server = RedisServer::start();
    let proxy = Proxy::to(&server).await;
    let holder = client(server.url(), Duration::from_millis(500)).await;
    let waiter = client(proxy.url(), Duration::from_millis(500)).await;
    let held = holder
        .lock("reset")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();

    // The next three acquires through the proxy lose their reply with their connection: the
    // waiter's first attempt and its same-value retry, then one more after a pause.
    proxy.fault_next_replies(3, ReplyFault::Reset, is_acquire);
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let result = waiter
            .lock("reset")
            .wait(Duration::from_secs(3))
            .acquire()
            .await;
        (result, started.elapsed(), waiter)
    });
    assert!(
        proxy.wait_faulted(3, Duration::from_secs(3)).await,
        "three acquire replies were reset"
    );
    // Still waiting (the resets did not end the wait), and subscribed to the release.
    eventually(Duration::from_secs(3), "the waiter subscribed", || async {
        let subscribed: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query_async(&mut server.conn().await)
            .await
            .unwrap();
        (!subscribed.is_empty()).then_some(())
    })
    .await;
    assert!(!waiting.is_finished(), "the wait ended at a reset");
    held.release().await.unwrap();

    let (result, waited, waiter) = waiting.await.unwrap();
    let guard = result.expect("the wait outlived the resets and took the released lock");
    assert!(waited < Duration::from_secs(3), "woken by the release");
    guard.release().await.unwrap();
    assert!(proxy.accepted() >= 2, "the waiter reconnected");
    drop(waiter);
}

#[tokio::test]
async fn a_wait_outlasts_a_failover_answering_readonly() {
    let server = RedisServer::start();
    let c = client(server.url(), Duration::from_millis(500)).await;
    // A failover that has not settled: every write is answered `READONLY`.
    server.demote().await;
    let before = server.error_replies("READONLY").await;

    let waiting = tokio::spawn({
        let c = c.clone();
        async move {
            let started = Instant::now();
            let result = c
                .lock("failover")
                .wait(Duration::from_secs(5))
                .acquire()
                .await;
            (result, started.elapsed())
        }
    });
    eventually(
        Duration::from_secs(3),
        "the acquire was refused twice",
        || async { (server.error_replies("READONLY").await >= before + 2).then_some(()) },
    )
    .await;
    assert!(!waiting.is_finished(), "READONLY ended the wait");
    let promoted = Instant::now();
    server.promote().await;

    let (result, waited) = waiting.await.unwrap();
    let guard = result.expect("the wait outlasted the failover");
    assert!(waited < Duration::from_secs(5));
    assert!(
        promoted.elapsed() < Duration::from_secs(1),
        "retried within the backoff's cap after the promotion"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_with_redis_gone_ends_with_the_last_error_when_it_runs_out() {
    let server = RedisServer::start();
    let proxy = Proxy::to(&server).await;
    let c = client(proxy.url(), Duration::from_millis(300)).await;
    // Nothing passes (a partition): each attempt times out; the wait goes on until it runs out.
    proxy.set_blackhole(true);
    let started = Instant::now();
    let error = c
        .lock("partitioned")
        .wait(Duration::from_millis(1500))
        .acquire()
        .await
        .expect_err("Redis is unreachable");
    let took = started.elapsed();
    assert!(
        matches!(
            error,
            Error::Timeout { .. } | Error::Redis { .. } | Error::ConnectTimeout { .. }
        ),
        "{error:?}"
    );
    assert!(error.is_transient(), "{error:?}");
    assert!(
        took >= Duration::from_millis(1500),
        "gave up early: {took:?}"
    );
    assert!(took < Duration::from_secs(4), "gave up late: {took:?}");

    // The server gone (connections refused): the same, with the connection error.
    proxy.set_blackhole(false);
    drop(proxy);
    let started = Instant::now();
    let error = c
        .lock("gone")
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .expect_err("Redis is unreachable");
    let took = started.elapsed();
    assert!(error.is_transient(), "{error:?}");
    assert!(!error.is_busy(), "{error:?}");
    assert!(took >= Duration::from_secs(1), "gave up early: {took:?}");
    assert!(took < Duration::from_secs(3), "gave up late: {took:?}");

    // Without `wait` nothing changes: the first failure is the answer.
    let started = Instant::now();
    let error = c.lock("once").acquire().await.expect_err("unreachable");
    assert!(error.is_transient(), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn a_take_whose_reply_was_lost_is_found_by_the_next_attempt() {
    let server = RedisServer::start();
    let proxy = Proxy::to(&server).await;
    let c = client(proxy.url(), Duration::from_millis(300)).await;
    let other = client(server.url(), Duration::from_millis(500)).await;

    // The acquire is applied but its reply never comes (the connection stays open): the attempt
    // times out, and the next one, with the same value, finds the lock its own.
    proxy.fault_next_replies(1, ReplyFault::Drop, is_acquire);
    let started = Instant::now();
    let guard = c
        .lock("dropped")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("the next attempt found its own take");
    assert_eq!(proxy.replies_faulted(), 1);
    assert!(started.elapsed() < Duration::from_secs(2));
    let busy = other.lock("dropped").acquire().await.map(drop);
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    guard.release().await.expect("released: one hold, ours");
    other
        .lock("dropped")
        .acquire()
        .await
        .expect("free after the release")
        .release()
        .await
        .unwrap();
}
