//! `distlock::testing` as a user's test suite would use it: many `#[tokio::test]` functions
//! (each with its own runtime) share one throwaway server and the default client, and
//! `assert_locked!` checks that code runs under its lock.

use std::time::Duration;

use distlock::{assert_locked, distributed_lock, testing};

#[derive(Debug, PartialEq)]
struct AppError(String);

impl From<distlock::Error> for AppError {
    fn from(e: distlock::Error) -> Self {
        AppError(e.to_string())
    }
}

/// Code under test: must only ever run under its lock.
async fn settle(id: u64) -> Result<u64, AppError> {
    let body = async move { assert_locked!("settle({id})") };
    Ok(distlock::lock(format!("order:{id}"))
        .fenced(true)
        .run(body)
        .await?)
}

/// Through the attribute, the lock is held while the body runs.
#[distributed_lock(key = "report:<day>", ttl = "5s")]
async fn nightly_report(day: u32) -> Result<bool, AppError> {
    Ok(testing::init()
        .await
        .is_locked(&format!("report:{day}"))
        .await)
}

/// A helper that forgot its lock.
async fn settle_unlocked(id: u64) -> Result<u64, AppError> {
    Ok(assert_locked!("settle({id})"))
}

#[tokio::test]
async fn first_test_settles_under_the_lock() {
    let redis = testing::init().await;
    let token = settle(1).await.unwrap();
    assert!(token > 0);
    assert!(!redis.is_locked("order:1").await, "released after the call");
    assert_eq!(nightly_report(1).await, Ok(true));
    assert!(!redis.is_locked("report:1").await);
}

#[tokio::test]
async fn second_test_shares_the_server_and_the_client() {
    let redis = testing::init().await;
    assert_eq!(redis.url(), testing::init().await.url());
    let guard = distlock::lock("order:2").acquire().await.unwrap();
    assert!(redis.is_locked("order:2").await);
    guard.release().await.unwrap();
    assert!(!redis.is_locked("order:2").await);
}

#[tokio::test]
async fn a_forgotten_lock_fails_the_assertion() {
    testing::init().await;
    let panic = tokio::spawn(settle_unlocked(3)).await.unwrap_err();
    let message = panic.into_panic();
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.starts_with("settle(3): not running under a fenced distributed lock"),
        "{message}"
    );
}

#[tokio::test]
async fn a_private_server_stops_when_dropped() {
    let redis = testing::TestRedis::start().unwrap();
    let client = redis.config().connect().await.unwrap();
    let guard = client
        .lock("job")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert!(redis.is_locked("job").await);
    guard.release().await.unwrap();
    let port = redis.port();
    drop(redis);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server on {port} is gone"
    );
}
