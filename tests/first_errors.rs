//! The errors a new user meets first, each saying what is wrong and how to fix it (issue 44):
//! a URL with another scheme or a path that is not a database number, a URL pointing at
//! another service's port (a real PostgreSQL), an observer with no client installed. (A fenced
//! write to Postgres before its table exists names `fence::sqlx::SCHEMA`:
//! `tests/fence_sqlx.rs`.)

use std::time::Duration;

use distlock::{Config, Error};
use futures_util::StreamExt;
use testkit::PostgresServer;

/// `Config::connect`'s error for `url`, as text (it must be `InvalidConfig`).
async fn invalid(url: &str) -> String {
    let err = Config::new(url).connect().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    err.to_string()
}

#[tokio::test]
async fn a_url_that_is_not_redis_says_why_and_the_accepted_forms() {
    let text = invalid("http://127.0.0.1:6379/").await;
    assert!(text.contains("`http://` is not a Redis scheme"), "{text}");
    assert!(
        text.contains("`redis://[[user]:password@]host[:port][/db]`"),
        "{text}"
    );

    let text = invalid("redis://127.0.0.1/abc").await;
    assert!(
        text.contains("its path `/abc` is not a database number"),
        "{text}"
    );
    assert!(text.contains("`redis://host:6379/0`"), "{text}");

    // A password in a refused URL is not shown.
    let text = invalid("http://user:hunter2@127.0.0.1:6379/").await;
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test]
async fn a_url_at_another_services_port_says_the_server_did_not_answer_as_redis() {
    let postgres = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap();
    let url = format!("redis://127.0.0.1:{}/", postgres.port());
    let err = Config::new(&url)
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("accepted the connection but did not answer as Redis"),
        "{text}"
    );
    assert!(text.contains(&url), "{text}");
    assert!(text.contains("6379 by default"), "{text}");
}

#[tokio::test]
async fn an_observer_with_no_client_installed_ends_with_the_error() {
    let mut seen = Box::pin(distlock::leader("nobody").client("missing").observe());
    let first = tokio::time::timeout(Duration::from_secs(2), seen.next())
        .await
        .expect("answered at once");
    match first {
        Some(Err(err @ Error::UnknownClient { .. })) => {
            assert!(err.to_string().contains("missing"), "{err}");
        }
        other => panic!("{other:?}"),
    }
}
