// Cargo.toml:
// [dev-dependencies]
// distlock = { git = "<this repository's URL>", features = ["testing"] } # not on crates.io yet
// tokio = { version = "1", features = ["macros", "rt", "sync", "time"] }

//! The path nobody tests: the lock lost while the body runs. Each test takes the lock away
//! from the code under test with one of `distlock::testing`'s faults, on a real redis-server,
//! and asserts what the code under test must do about it.

use std::time::Duration;

use distlock::fence::redis::FencedStore;
use distlock::testing::{self, TestRedis, TestSentinel};
use distlock::{distributed_lock, Error, LossReason};
use tokio::sync::oneshot;
use tokio::time::timeout;

/// Long enough for any fault below to be noticed, far shorter than the leases' renewals.
const TOLD_WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct AppError(Error);

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError(e)
    }
}

/// The code under test: settles an order under its lock (renewed every 10 s), and says when
/// its body has started.
#[distributed_lock(key = "order:<id>", ttl = "30s", renew)]
async fn settle(id: u64, started: oneshot::Sender<()>) -> Result<&'static str, AppError> {
    let _ = started.send(());
    tokio::time::sleep(Duration::from_secs(60)).await; // a slow payment provider
    Ok("settled")
}

#[tokio::test]
async fn a_lock_that_expires_mid_body_cancels_the_settlement() {
    let redis = testing::init().await;
    let (started, body_started) = oneshot::channel();
    let settling = tokio::spawn(settle(1, started));
    body_started.await.unwrap();
    redis.expire_lock("order:1").await; // its lease ran out on the server, now
    let outcome = timeout(TOLD_WITHIN, settling).await.unwrap().unwrap();
    assert!(
        matches!(
            outcome,
            Err(AppError(Error::Lost {
                reason: LossReason::Expired,
                ..
            }))
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_stale_holders_fenced_write_is_refused() {
    let redis = testing::init().await;
    let guard = distlock::lock("account:7")
        .fenced(true)
        .acquire()
        .await
        .unwrap();
    let stale = guard.fence().unwrap(); // what a worker that stalls would still carry
    let new_holder = redis.steal_lock("account:7").await; // as after a failover
    let told = timeout(TOLD_WITHIN, guard.lost()).await.unwrap();
    assert_eq!(told, LossReason::Stolen);
    let conn = distlock::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut store = FencedStore::new(conn, Duration::from_secs(60));
    store.claim(&new_holder.fence()).await.unwrap(); // what a new holder does first
    let refused = store.set("balance:{account:7}", 100, &stale).await;
    assert!(matches!(refused, Err(Error::Fenced { .. })), "{refused:?}");
    new_holder.release().await.unwrap();
}

#[tokio::test]
async fn a_frozen_server_cancels_the_body_when_its_lease_runs_out() {
    let redis = TestRedis::start().unwrap(); // a private server: a pause stops every client
    let client = redis
        .config()
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let (started, body_started) = oneshot::channel();
    let job = client
        .lock("report")
        .ttl(Duration::from_secs(1))
        .renew(true);
    let job = tokio::spawn(job.run(async move {
        let _ = started.send(());
        tokio::time::sleep(Duration::from_secs(60)).await;
    }));
    body_started.await.unwrap();
    let frozen = redis.pause(); // SIGSTOP until dropped
    let outcome = timeout(TOLD_WITHIN, job).await.unwrap().unwrap();
    drop(frozen);
    assert!(
        matches!(
            outcome,
            Err(Error::Lost {
                reason: LossReason::Unreachable,
                ..
            })
        ),
        "{outcome:?}"
    );
    client.settle().await; // its release answered, before the private server stops
}

#[tokio::test]
async fn a_server_clock_step_expires_the_lock_and_its_holder_is_told() {
    let redis = TestRedis::start().unwrap(); // a private server: a step moves every key
    let client = redis.config().connect().await.unwrap();
    let lock = client.lock("nightly").ttl(Duration::from_secs(30));
    let guard = lock.acquire().await.unwrap(); // not renewed: nothing else would tell it
    redis.step_clock(Duration::from_secs(60)).await; // the server's clock jumps a minute
    let told = timeout(TOLD_WITHIN, guard.lost()).await.unwrap();
    assert_eq!(told, LossReason::Expired);
    drop(guard);
    client.settle().await; // its release answered, before the private server stops
}

#[tokio::test]
async fn a_failover_keeps_a_replicated_lock_and_loses_one_the_replica_missed() {
    let group = TestSentinel::start().await.unwrap(); // a master, a replica, a sentinel
    let client = group.config().connect().await.unwrap();
    let kept = client.lock("kept").min_replicas(1).renew(true);
    let kept = kept.acquire().await.unwrap();
    group.failover_seen_by(&client).await; // the client follows and confirms its leases
    kept.ensure_held().unwrap(); // the replica had it
    let lost = client.lock("lost").renew(true).acquire().await.unwrap();
    group.failover_losing("lost").await; // to a replica the lock had not reached
    let told = timeout(TOLD_WITHIN, lost.lost()).await.unwrap();
    assert_eq!(told, LossReason::Expired);
}

#[tokio::test]
async fn a_crashed_replicas_waiters_do_not_hold_the_others_back() {
    let redis = TestRedis::start().unwrap();
    let client = redis.config().connect().await.unwrap();
    let held = client.lock("seat:7").acquire().await.unwrap();
    let replica = redis.crashable().await.unwrap(); // a client the test kills as SIGKILL would
    let waiting: Vec<_> = (0..10)
        .map(|_| {
            let lock = replica
                .client()
                .lock("seat:7")
                .wait(Duration::from_secs(30));
            tokio::spawn(async move { lock.acquire().await })
        })
        .collect();
    while redis.queued("seat:7").await < 10 {
        tokio::time::sleep(Duration::from_millis(10)).await; // the replica's waiters queue
    }
    let next = client.lock("seat:7").wait(Duration::from_secs(30));
    let next = tokio::spawn(async move { next.acquire().await });
    while redis.queued("seat:7").await < 11 {
        tokio::time::sleep(Duration::from_millis(10)).await; // and ours behind them
    }
    replica.crash().await; // its waiters stay queued in Redis: none of them leaves
    waiting.iter().for_each(|task| task.abort());
    held.release().await.unwrap();
    let taken = timeout(TOLD_WITHIN, next).await.unwrap().unwrap().unwrap();
    taken.release().await.unwrap(); // one grant window (1 s) for all ten, not one each
}
