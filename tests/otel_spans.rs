//! The `distlock.acquire` span follows the OpenTelemetry attribute convention of
//! `docs/observability.md` ("OpenTelemetry"): `lock.name`, `lock.kind`, `lock.template`,
//! `lock.outcome` and, on a failure, `otel.status_code = "ERROR"`. Captured from real
//! acquisitions against a real server by a subscriber that keeps every span's fields (those
//! given at its start and those recorded later), for each kind of hold and each outcome.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{distributed_lock, Client, Config};
use redis::AsyncCommands;
use testkit::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One span: its name and its fields, as text.
#[derive(Debug, Clone)]
struct Captured {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

impl Captured {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// Keeps every span it is given, by id (the index + 1).
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Captured>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let mut fields = BTreeMap::new();
        attributes.record(&mut Fields(&mut fields));
        let mut spans = self.0.lock().unwrap();
        spans.push(Captured {
            name: attributes.metadata().name(),
            fields,
        });
        Id::from_u64(spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.0.lock().unwrap();
        let index = usize::try_from(span.into_u64() - 1).unwrap();
        values.record(&mut Fields(&mut spans[index].fields));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Spans {
    /// The acquire spans captured so far, taken out.
    fn take(&self) -> Vec<Captured> {
        let spans = std::mem::take(&mut *self.0.lock().unwrap());
        spans
            .into_iter()
            .filter(|s| s.name == "distlock.acquire")
            .collect()
    }

    /// The one acquire span captured since the last look.
    fn one(&self) -> Captured {
        let mut spans = self.take();
        assert_eq!(spans.len(), 1, "{spans:#?}");
        spans.remove(0)
    }
}

/// Asserts the convention's fields of `span`: name, kind, template, outcome, and the status
/// code (`None`: not set).
fn assert_span(span: &Captured, name: &str, kind: &str, template: &str, outcome: &str) {
    assert_eq!(span.field("lock.name"), Some(name), "{span:#?}");
    assert_eq!(span.field("key"), Some(name), "{span:#?}");
    assert_eq!(span.field("lock.kind"), Some(kind), "{span:#?}");
    assert_eq!(span.field("lock.template"), Some(template), "{span:#?}");
    assert_eq!(span.field("lock.outcome"), Some(outcome), "{span:#?}");
    let failed = matches!(outcome, "error" | "lost");
    let status = failed.then_some("ERROR");
    assert_eq!(span.field("otel.status_code"), status, "{span:#?}");
    assert!(span.field("ttl_ms").is_some(), "{span:#?}");
}

#[derive(Debug)]
struct AppError(#[allow(dead_code)] distlock::Error);

impl From<distlock::Error> for AppError {
    fn from(e: distlock::Error) -> Self {
        AppError(e)
    }
}

#[distributed_lock(key = "otel:job:<id>", client = "otel", skip)]
async fn job(id: u32) -> Result<Option<u32>, AppError> {
    Ok(Some(id))
}

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url()).connect().await.expect("connect")
}

#[tokio::test]
async fn each_outcome_and_kind_carries_the_convention() {
    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(spans.clone());
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    const T: &str = "otel:<n>";

    // Acquired, busy, timeout.
    let held = a.lock("otel:1").label(T).acquire().await.unwrap();
    assert_span(&spans.one(), "otel:1", "lock", T, "acquired");
    assert!(b.lock("otel:1").label(T).acquire().await.is_err());
    assert_span(&spans.one(), "otel:1", "lock", T, "busy");
    let wait = Duration::from_millis(50);
    assert!(b
        .lock("otel:1")
        .label(T)
        .wait(wait)
        .acquire()
        .await
        .is_err());
    assert_span(&spans.one(), "otel:1", "lock", T, "timeout");
    held.release().await.unwrap();

    // Without a label: the template is `unlabeled`.
    testkit::take_and_release(&a, "otel:2").await;
    assert_span(&spans.one(), "otel:2", "lock", "unlabeled", "acquired");

    // Re-entered inside a body; an outer hold found gone on re-entry is lost.
    let mut admin = server.conn().await;
    let outer = a.lock("otel:3").label(T);
    outer
        .run(async {
            let inner = a.lock("otel:3").label(T).acquire().await.unwrap();
            drop(inner);
            let _: () = admin.del("distlock:{otel:3}").await.unwrap();
            let lost = a.lock("otel:3").label(T).acquire().await.unwrap_err();
            assert!(lost.is_lost(), "{lost}");
        })
        .await
        .unwrap_err();
    let three = spans.take();
    assert_eq!(three.len(), 3, "{three:#?}");
    assert_span(&three[0], "otel:3", "lock", T, "acquired");
    assert_span(&three[1], "otel:3", "lock", T, "reentered");
    assert_span(&three[2], "otel:3", "lock", T, "lost");

    // The other kinds: a permit, a read hold, a set (its names, comma-separated, in order).
    let permit = a.semaphore("otel:sem", 2).label(T).acquire().await.unwrap();
    assert_span(&spans.one(), "otel:sem", "permit", T, "acquired");
    permit.release().await.unwrap();
    let read = a.lock("otel:rw").label(T).read().acquire().await.unwrap();
    assert_span(&spans.one(), "otel:rw", "read", T, "acquired");
    read.release().await.unwrap();
    let set = a.lock_all(["otel:y", "otel:x"]).label(T).acquire().await;
    set.unwrap().release().await.unwrap();
    assert_span(&spans.one(), "otel:x, otel:y", "set", T, "acquired");

    // The attribute's template, and its skip.
    let named = Config::new(server.url()).install_as("otel").await.unwrap();
    let held = named.lock("otel:job:7").acquire().await.unwrap();
    spans.take();
    assert!(matches!(job(7).await, Ok(None)));
    assert_span(
        &spans.one(),
        "otel:job:7",
        "lock",
        "otel:job:<id>",
        "skipped",
    );
    held.release().await.unwrap();

    // An error reply: an error, and the span's status says so.
    let url = server
        .acl_user("no-set", "no-set-pass", &["~*", "&*", "+@all", "-set"])
        .await;
    let refused = Config::new(url).connect().await.expect("connect as no-set");
    spans.take();
    let error = refused.lock("otel:4").label(T).acquire().await.unwrap_err();
    assert!(!error.is_busy() && !error.is_lost(), "{error}");
    assert_span(&spans.one(), "otel:4", "lock", T, "error");
}
