//! The process-wide client registry and connection set-up errors. One test function: the
//! registry is global to the process, so the steps run in order.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Config, Error};
use testkit::{RedisServer, ServerOptions};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_lifecycle_and_setup_errors() {
    let logs = Captured::default();
    let sink = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .init();

    // Before init: a clear, typed error that says what to do.
    let err = distlock::lock("a").acquire().await.unwrap_err();
    assert!(matches!(err, Error::NotInitialized), "{err}");
    assert!(err.to_string().contains("distlock::init"), "{err}");

    // Bad URLs and credentials fail at init, never echoing the password.
    let err = distlock::init("http://not-redis").await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    let err = Config::new("redis://:pa55word@[::1")
        .install()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(!err.to_string().contains("pa55word"), "{err}");

    let secured = RedisServer::start_with(ServerOptions {
        password: Some("s3cret-pass".into()),
        ..Default::default()
    });
    let wrong = format!("redis://:wrong-pass@127.0.0.1:{}/", secured.port());
    let err = distlock::init(wrong).await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(!err.to_string().contains("wrong-pass"), "{err}");
    // It names the server it tried, password masked.
    let tried = format!("redis://:***@127.0.0.1:{}/", secured.port());
    assert!(err.to_string().contains(&tried), "{err}");

    // No password for a server that wants one: reported at init, not at the first lock.
    let err = distlock::init(format!("redis://127.0.0.1:{}/", secured.port()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    // Connect errors name no lock (there is none yet).
    assert!(!err.to_string().contains("lock `"), "{err}");

    // Nothing listening: a connect error, bounded by the connect timeout, naming the address.
    let nowhere = format!("redis://127.0.0.1:{}/", testkit::free_port());
    let err = Config::new(&nowhere)
        .connect_timeout(Duration::from_millis(300))
        .install()
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains(&nowhere), "{err}");

    // A bare `host:port`: shown as written (nothing in it is secret), with the fix.
    let err = Config::new("127.0.0.1:6390").connect().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("`127.0.0.1:6390` is not a valid Redis URL"),
        "{err}"
    );
    assert!(text.contains("add `redis://`"), "{err}");
    assert!(text.contains("`redis://127.0.0.1:6390/`"), "{err}");

    // The default client, then a named one (with a password), in the same registry.
    let server = RedisServer::start();
    distlock::init(server.url()).await.unwrap();
    let err = distlock::init(server.url()).await.unwrap_err();
    assert!(
        matches!(err, Error::AlreadyInitialized { client: None }),
        "{err}"
    );
    Config::new(secured.url())
        .key_prefix("pay")
        .install_as("payments")
        .await
        .unwrap();
    let err = Config::new(secured.url())
        .install_as("payments")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::AlreadyInitialized { client: Some(n) } if n == "payments"),
        "{err}"
    );

    let g = distlock::lock("a").acquire().await.unwrap();
    let p = distlock::lock("a")
        .client("payments")
        .acquire()
        .await
        .unwrap();
    let mut conn = secured.conn().await;
    let exists: bool = redis::cmd("EXISTS")
        .arg("pay:{a}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(exists, "named client uses its own server and prefix");
    g.release().await.unwrap();
    p.release().await.unwrap();

    let err = distlock::lock("a")
        .client("nope")
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownClient { name } if name == "nope"),
        "{err}"
    );
    assert!(err.to_string().contains("install_as(\"nope\")"), "{err}");

    // Observability: acquire spans and events are emitted; the password never is.
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("distlock.acquire"), "acquire span logged");
    assert!(text.contains("acquired"), "acquire outcome logged");
    assert!(text.contains("released"), "release logged");
    assert!(
        text.contains("redis://:***@127.0.0.1"),
        "redacted URL logged: {text}"
    );
    for secret in ["s3cret-pass", "wrong-pass", "pa55word"] {
        assert!(!text.contains(secret), "{secret} leaked into logs");
    }
}
