//! Small lock helpers the integration tests share: a client with short timeouts, a lock taken
//! and released at once, a lock taken once the server answers again.

use std::time::Duration;

use distlock::{Client, Config, LockGuard};

use crate::inspect::eventually;
use crate::server::RedisServer;

/// A client of `server` with 500 ms connect and response timeouts, so faults show quickly.
pub async fn quick_client(server: &RedisServer) -> Client {
    client_with(server.url(), Duration::from_millis(500)).await
}

/// A client of `url` with `response_timeout` and a 500 ms connect timeout.
pub async fn client_with(url: impl Into<String>, response_timeout: Duration) -> Client {
    Config::new(url)
        .response_timeout(response_timeout)
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// Takes `name` at once and releases it (the lock must be free).
pub async fn take_and_release(c: &Client, name: &str) {
    c.lock(name)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Acquires `name` once the server answers again (after a fault), within 5 s; `what` names the
/// wait in the failure message.
pub async fn acquire_soon(c: &Client, name: &str, what: &str) -> LockGuard {
    eventually(Duration::from_secs(5), what, || {
        let c = c.clone();
        let name = name.to_owned();
        async move { c.lock(name).acquire().await.ok() }
    })
    .await
}
