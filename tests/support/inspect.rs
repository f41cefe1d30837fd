//! Looking into Redis from a test: waiting for a condition, the keys there are, command counts.

use std::time::Duration;

/// Runs `f` until it returns `Some`, or panics after `within` (for conditions Redis exposes no
/// signal for, such as `PUBSUB CHANNELS` emptying after an asynchronous unsubscribe).
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// All keys on the server (test servers are small).
pub async fn all_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query_async(conn)
        .await
        .expect("KEYS")
}

/// The lock keys on the server (`prefix:{name}`; not fence keys or identity records).
pub async fn lock_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    all_keys(conn)
        .await
        .into_iter()
        .filter(|k| k.ends_with('}'))
        .collect()
}

/// The `calls` count of one command in `INFO commandstats` (e.g. `evalsha`).
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Channels subscribed on the server (`PUBSUB CHANNELS`).
pub async fn pubsub_channels(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(conn)
        .await
        .unwrap()
}

/// Entries in the waiters' queue of the lock or semaphore `name` (default prefix), the queue a
/// release hands the hold over from.
pub async fn queued(conn: &redis::aio::MultiplexedConnection, name: &str) -> usize {
    let mut conn = conn.clone();
    redis::cmd("ZCARD")
        .arg(format!("distlock:{{{name}}}:queue"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Waits (up to 5 s) until `n` waiters are queued for `name` (see [`queued`]).
pub async fn until_queued(conn: &redis::aio::MultiplexedConnection, name: &str, n: usize) {
    eventually(Duration::from_secs(5), "waiters queued", || async move {
        (queued(conn, name).await == n).then_some(())
    })
    .await;
}
