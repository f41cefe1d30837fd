//! Belief ends when the hold ends: the moment a holder lets go (a leader's resign or dropped
//! `Leadership`, a guard's `release()` or drop), every `lost()` of that hold resolves with
//! `LossReason::Released` — before the next holder can be handed the lock — and what still
//! shares the hold (a body asking `distlock::ensure_held()`) is told.
//!
//! The `lost()` future is polled by the next holder the moment it has the lock (no await in
//! between): it must be ready by then. (A task awaiting it is woken at that moment; when it
//! runs is the scheduler's business.)

use std::future::Future;
use std::time::Duration;

use futures_util::FutureExt;

use distlock::{Client, Error, LossReason};
use testkit::delay::DelayProxy;
use testkit::{client_with, quick_client, RedisServer};

/// The holder's client, through a delay line of 150 ms each way: its release reaches Redis
/// 150 ms after it was sent and its answer comes back 150 ms later, so the next holder (near
/// Redis) has the lock 150 ms before the old one hears the answer. A belief that ended only
/// with the answer would still be on when the next holder looks.
async fn far_client(server: &RedisServer) -> (Client, DelayProxy) {
    let line = DelayProxy::to(server, Duration::from_millis(150));
    (client_with(line.url(), Duration::from_secs(2)).await, line)
}

/// Polls `lost` once (at the moment the next holder has the lock): it must be ready, with
/// `Released`.
fn resolved_by_now(lost: impl Future<Output = LossReason>, what: &str) {
    match lost.now_or_never() {
        Some(reason) => assert_eq!(reason, LossReason::Released, "{what}"),
        None => panic!("{what}: lost() still pending when the next holder had the lock"),
    }
}

#[tokio::test]
async fn a_resigned_leaders_lost_resolves_before_the_next_leader_is_elected() {
    let server = RedisServer::start();
    let ((a, _line), b) = (far_client(&server).await, quick_client(&server).await);
    for round in 0..5 {
        let leading = a
            .leader("belief")
            .ttl(Duration::from_secs(5))
            .campaign()
            .await
            .unwrap();
        let lost = leading.lost();
        let next = tokio::spawn({
            let b = b.clone();
            async move {
                let elected = b
                    .leader("belief")
                    .ttl(Duration::from_secs(5))
                    .campaign()
                    .await
                    .unwrap();
                resolved_by_now(lost, "the resigned leader's");
                elected
            }
        });
        testkit::until_queued(&server.conn().await, "belief", 1).await;
        // Resigned in even rounds, dropped in odd ones: both end belief at once.
        if round % 2 == 0 {
            leading.resign().await.unwrap();
        } else {
            drop(leading);
        }
        next.await.unwrap().resign().await.unwrap();
    }
}

#[tokio::test]
async fn a_released_guards_lost_resolves_before_the_next_holder_takes_the_lock() {
    let server = RedisServer::start();
    let ((a, _line), b) = (far_client(&server).await, quick_client(&server).await);
    for round in 0..6 {
        let guard = a
            .lock("belief:lock")
            .ttl(Duration::from_secs(5))
            .renew(true)
            .acquire()
            .await
            .unwrap();
        let lost = guard.lost();
        let next = tokio::spawn({
            let b = b.clone();
            async move {
                let taken = b
                    .lock("belief:lock")
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
                    .unwrap();
                resolved_by_now(lost, "the released guard's");
                taken
            }
        });
        testkit::until_queued(&server.conn().await, "belief:lock", 1).await;
        if round % 2 == 0 {
            guard.release().await.unwrap();
        } else {
            drop(guard);
        }
        next.await.unwrap().release().await.unwrap();
    }
}

#[tokio::test]
async fn a_leaders_body_that_resigned_is_told_it_no_longer_leads() {
    let server = RedisServer::start();
    let a = quick_client(&server).await;
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
