//! distlock-core waiting against a real redis-server: waiters are woken by the release (not by
//! polling), take over from a crashed holder at its ttl, and take turns within a client.

use std::sync::Arc;
use std::time::Duration;

use distlock::Error;
use testkit::{
    command_calls, eventually, pubsub_channels as channels, quick_client as client, RedisServer,
};
use tokio::time::Instant;

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
    // The waiter is subscribed once its channel shows up on the server, and queued (it is
    // handed the lock by the release) once its entry does.
    eventually(
        Duration::from_secs(5),
        "waiter subscribed and queued",
        || {
            let mut conn = conn.clone();
            async move {
                let chans = channels(&mut conn).await;
                let queued: usize = redis::cmd("ZCARD")
                    .arg("distlock:{w}:queue")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                (chans == ["distlock:{w}:released"] && queued == 1).then_some(())
            }
        },
    )
    .await;
    let evalsha_before = command_calls(&mut conn, "evalsha").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Waiting costs no round trips (no polling) while the holder's lease is long (a handed
    // waiter looks again once a second at most).
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
