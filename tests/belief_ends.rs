//! Belief ends when the hold ends: the moment a holder lets go (a leader's resign or dropped
//! `Leadership`, a guard's `release()` or drop), every `lost()` of that hold resolves with
//! `LossReason::Released` — before the next holder can be handed the lock — and what still
//! shares the hold (a body asking `distlock::ensure_held()`) is told.
//!
//! The task awaiting `lost()` runs on a runtime of its own thread, so nothing on the test's
//! runtime delays it; its timestamp is compared with the moment the next holder had the lock.

use std::future::Future;
use std::time::{Duration, Instant};

use distlock::{Client, Config, Error, LossReason};
use testkit::RedisServer;

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// Awaits `lost` on a thread and runtime of its own; joined, when it resolved and why.
fn watch(
    lost: impl Future<Output = LossReason> + Send + 'static,
) -> std::thread::JoinHandle<(LossReason, Instant)> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let reason = tokio::time::timeout(Duration::from_secs(20), lost)
                .await
                .expect("lost() resolves");
            (reason, Instant::now())
        })
    })
}

/// Asserts the watcher resolved with `Released`, before `next_at`.
fn resolved_before(watcher: std::thread::JoinHandle<(LossReason, Instant)>, next_at: Instant) {
    let (reason, at) = watcher.join().expect("the watcher");
    assert_eq!(reason, LossReason::Released);
    assert!(
        at < next_at,
        "lost() resolved {:?} after the next holder had the lock",
        at - next_at
    );
}

#[tokio::test]
async fn a_resigned_leaders_lost_resolves_before_the_next_leader_is_elected() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    for round in 0..5 {
        let leading = a
            .leader("belief")
            .ttl(Duration::from_secs(5))
            .campaign()
            .await
            .unwrap();
        let watcher = watch(leading.lost());
        let next = tokio::spawn({
            let b = b.clone();
            async move {
                let elected = b
                    .leader("belief")
                    .ttl(Duration::from_secs(5))
                    .campaign()
                    .await
                    .unwrap();
                (Instant::now(), elected)
            }
        });
        testkit::until_queued(&server.conn().await, "belief", 1).await;
        // Resigned in even rounds, dropped in odd ones: both end belief at once.
        if round % 2 == 0 {
            leading.resign().await.unwrap();
        } else {
            drop(leading);
        }
        let (elected_at, elected) = next.await.unwrap();
        resolved_before(watcher, elected_at);
        elected.resign().await.unwrap();
    }
}

#[tokio::test]
async fn a_released_guards_lost_resolves_before_the_next_holder_takes_the_lock() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    for round in 0..6 {
        let guard = a
            .lock("belief:lock")
            .ttl(Duration::from_secs(5))
            .renew(true)
            .acquire()
            .await
            .unwrap();
        let watcher = watch(guard.lost());
        let next = tokio::spawn({
            let b = b.clone();
            async move {
                let taken = b
                    .lock("belief:lock")
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
                    .unwrap();
                (Instant::now(), taken)
            }
        });
        testkit::until_queued(&server.conn().await, "belief:lock", 1).await;
        if round % 2 == 0 {
            guard.release().await.unwrap();
        } else {
            drop(guard);
        }
        let (taken_at, taken) = next.await.unwrap();
        resolved_before(watcher, taken_at);
        taken.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_leaders_body_that_resigned_is_told_it_no_longer_leads() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let (before, after, ended) = a
        .leader("belief:body")
        .run(|leadership| async move {
            let before = distlock::ensure_held();
            let lost = leadership.lost();
            leadership.resign().await.unwrap();
            // The body runs on after its own resign, as a follower: told so.
            let after = distlock::ensure_held();
            (before, after, lost.await)
        })
        .await
        .unwrap();
    before.expect("held inside the body before the resign");
    match after {
        Err(Error::Lost { reason, .. }) => assert_eq!(reason, LossReason::Released),
        other => panic!("ensure_held() after the resign: {other:?}"),
    }
    assert_eq!(ended, LossReason::Released);
}

#[tokio::test]
async fn ensure_held_outside_a_locked_body_says_there_is_no_lock() {
    assert!(matches!(distlock::ensure_held(), Err(Error::NotLocked)));
}
