//! Lock metrics (feature `metrics`; `cargo test --test metrics --features metrics`) against a
//! real redis-server: the exact counts of scripted runs, read from `metrics-util`'s debugging
//! recorder installed as the process's global recorder (the watchdog renews on the client's own
//! runtime thread, which a thread-local recorder would not see).
//!
//! The tests by topic: `acquire` (what taking a hold counts: outcomes, waits and holds per
//! label, the attribute's template label and skips, a RedLock quorum's waiters, the `kind`
//! label), `lifecycle` (what a hold counts once taken: renewals, their margins and the hold's
//! age, a lease or a release lost, retried transient failures, the gauges back to 0 on every
//! exit path) and `servers` (what a client saw happen to its servers). Here: the recorder, the
//! readers of its series, and the check that the docs name every metric.
//!
//! Each test uses its own `lock` labels, so tests running side by side in this process do not
//! touch each other's series; only `renewals_lease_loss_and_release_loss` renews leases, so the
//! unlabeled renewal series are its own.

mod acquire;
mod lifecycle;
mod servers;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use distlock::{Client, Config};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use testkit::RedisServer;

/// A series: metric name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What the recorder has seen so far. The debugging recorder's snapshots are destructive (they
/// swap counters and gauges to 0 and drain histograms), so the totals are folded in here; gauges
/// are only ever moved by `increment`/`decrement`, so their snapshots add up too.
#[derive(Default)]
struct Seen {
    counters: BTreeMap<Series, u64>,
    gauges: BTreeMap<Series, f64>,
    histograms: BTreeMap<Series, Vec<f64>>,
}

struct Recorded {
    snapshotter: Snapshotter,
    seen: Mutex<Seen>,
}

/// The process's recorder, installed on first use (before any lock is taken).
fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the only recorder of this test process");
        Recorded {
            snapshotter,
            seen: Mutex::default(),
        }
    })
}

/// Everything recorded until now.
fn seen() -> std::sync::MutexGuard<'static, Seen> {
    let recorded = recorded();
    let mut seen = recorded.seen.lock().unwrap();
    for (key, _, _, value) in recorded.snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let series = (key.name().to_owned(), labels);
        match (kind, value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                *seen.counters.entry(series).or_default() += n;
            }
            (MetricKind::Gauge, DebugValue::Gauge(delta)) => {
                *seen.gauges.entry(series).or_default() += delta.into_inner();
            }
            (MetricKind::Histogram, DebugValue::Histogram(values)) => seen
                .histograms
                .entry(series)
                .or_default()
                .extend(values.into_iter().map(|v| v.into_inner())),
            (kind, value) => panic!("{kind:?} with {value:?}"),
        }
    }
    seen
}

/// The series `name` with `labels`; one with a `lock` label and no `kind` is a lock's (kind
/// `lock`), as every lock of the tests that do not say otherwise.
fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let has = |key: &str| labels.iter().any(|(k, _)| k == key);
    if has("lock") && !has("kind") {
        labels.push(("kind".to_owned(), "lock".to_owned()));
    }
    labels.sort();
    (name.to_owned(), labels)
}

fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    seen()
        .counters
        .get(&series(name, labels))
        .copied()
        .unwrap_or(0)
}

fn gauge(name: &str, lock: &str) -> f64 {
    seen()
        .gauges
        .get(&series(name, &[("lock", lock)]))
        .copied()
        .unwrap_or(0.0)
}

fn histogram(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    seen()
        .histograms
        .get(&series(name, labels))
        .cloned()
        .unwrap_or_default()
}

/// `distlock_acquire_total{lock, outcome}`.
fn acquires(lock: &str, outcome: &str) -> u64 {
    counter(
        "distlock_acquire_total",
        &[("lock", lock), ("outcome", outcome)],
    )
}

/// Every `distlock_acquire_total` outcome of `lock`, in the order of the list.
fn outcomes(lock: &str) -> [u64; 6] {
    [
        "acquired",
        "reentered",
        "busy",
        "skipped",
        "timeout",
        "error",
    ]
    .map(|o| acquires(lock, o))
}

fn renewals(outcome: &str) -> u64 {
    counter("distlock_renewals_total", &[("outcome", outcome)])
}

/// Every `lock` label value recorded in any series.
fn lock_labels() -> Vec<String> {
    let seen = seen();
    let names = seen
        .counters
        .keys()
        .chain(seen.gauges.keys())
        .chain(seen.histograms.keys());
    let mut labels: Vec<String> = names
        .flat_map(|(_, labels)| labels.iter().filter(|(k, _)| k == "lock"))
        .map(|(_, v)| v.clone())
        .collect();
    labels.sort();
    labels.dedup();
    labels
}

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url()).connect().await.expect("connect")
}

/// The Redis key of the lock named `name` (default prefix).
fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// Every metric the runtime defines (`distlock-core/src/metrics.rs`) is in the "Metrics" table
/// of the crate docs and of `docs/observability.md`, and the tables name no other.
#[test]
fn every_metric_is_documented() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let source = read("distlock-core/src/metrics.rs");
    let defined: Vec<&str> = source
        .lines()
        .filter_map(|l| l.strip_prefix("pub(crate) const "))
        .filter_map(|l| l.split('"').nth(1))
        .filter(|name| name.starts_with("distlock_"))
        .collect();
    assert_eq!(defined.len(), 16, "{defined:?}");
    for (doc, text) in [
        ("distlock/src/lib.rs", read("distlock/src/lib.rs")),
        ("docs/observability.md", read("docs/observability.md")),
    ] {
        // The table rows: "| `distlock_...` |" (in the crate docs, after "//! ").
        let listed: Vec<&str> = text
            .lines()
            .map(|l| l.trim_start_matches("//!").trim_start())
            .filter_map(|l| l.strip_prefix("| `distlock_"))
            .filter_map(|l| l.split('`').next())
            .collect();
        for name in &defined {
            let name = name.trim_start_matches("distlock_");
            assert!(
                listed.contains(&name),
                "{doc} does not list distlock_{name}"
            );
        }
        assert_eq!(listed.len(), defined.len(), "{doc} lists {listed:?}");
    }
}
