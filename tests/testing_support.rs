//! `distlock::testing` as a user's test suite would use it: many `#[tokio::test]` functions
//! (each with its own runtime) share one throwaway server and the default client, and
//! `assert_locked!` checks that code runs under its lock. The first part is the example of
//! `docs/testing.md`, verbatim.

use distlock::{assert_locked, distributed_lock, testing};

#[derive(Debug)]
struct AppError(distlock::Error);

impl From<distlock::Error> for AppError {
    fn from(e: distlock::Error) -> Self {
        AppError(e)
    }
}

#[distributed_lock(key = "order:<id>", ttl = "10s", fenced)]
async fn settle(id: u64) -> Result<u64, AppError> {
    // Panics if it ever runs without its lock; a `fenced` lock's token comes with it.
    let token = assert_locked!("settle({id})").expect("a fenced lock has a token");
    Ok(token)
}

#[tokio::test]
async fn settles_under_the_lock() {
    let redis = testing::init().await; // the first call starts redis-server, installs the client
    assert!(settle(42).await.unwrap() > 0);
    assert!(
        !redis.is_locked("order:42").await,
        "released after the call"
    );
}

#[tokio::test]
async fn a_busy_order_is_not_settled_twice() {
    testing::init().await; // the same server and client, from another test's runtime
    let held = distlock::lock("order:7").acquire().await.unwrap();
    let busy = settle(7).await.unwrap_err();
    assert!(
        matches!(busy, AppError(distlock::Error::Busy { .. })),
        "{busy:?}"
    );
    held.release().await.unwrap();
}

// (end of the example of docs/testing.md)

/// A helper that forgot its lock.
async fn settle_unlocked(id: u64) -> Result<Option<u64>, AppError> {
    Ok(assert_locked!("settle({id})"))
}

/// An unfenced lock satisfies the assertion too; it has no token.
#[distributed_lock(key = "audit:<id>", ttl = "5s")]
async fn audit(id: u64) -> Result<Option<u64>, AppError> {
    Ok(assert_locked!("audit({id})"))
}

/// Through the attribute, the lock is held while the body runs.
#[distributed_lock(key = "report:<day>", ttl = "5s")]
async fn nightly_report(day: u32) -> Result<bool, AppError> {
    Ok(testing::init()
        .await
        .is_locked(&format!("report:{day}"))
        .await)
}

#[tokio::test]
async fn a_lock_is_visible_from_outside_while_held() {
    let redis = testing::init().await;
    assert_eq!(redis.url(), testing::init().await.url());
    assert!(nightly_report(1).await.unwrap());
    assert!(!redis.is_locked("report:1").await);
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
        message.starts_with("settle(3): not running under a distributed lock"),
        "{message}"
    );
}

#[tokio::test]
async fn an_unfenced_lock_satisfies_the_assertion_without_a_token() {
    testing::init().await;
    assert_eq!(audit(5).await.unwrap(), None);
}

#[tokio::test]
async fn a_private_server_stops_when_dropped() {
    let redis = testing::TestRedis::start().unwrap();
    let client = redis.config().connect().await.unwrap();
    let guard = client.lock("job").acquire().await.unwrap();
    assert!(redis.is_locked("job").await);
    guard.release().await.unwrap();
    let port = redis.port();
    drop(redis);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server on {port} is gone"
    );
}
