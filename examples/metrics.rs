//! Lock metrics in Prometheus' text format (feature `metrics`).
//!
//! Installs `metrics-exporter-prometheus`'s recorder (no HTTP listener: the application serves
//! `handle.render()` wherever it likes) with the histogram buckets the operator's kit in `ops/`
//! expects (`distlock::HISTOGRAM_BUCKETS`: its rules, alerts and dashboard read `_bucket` series),
//! takes a few locks (at once, after waiting, a skip, a timeout) and prints the scrape. Every
//! series is labelled with the key *template* (`order:<id>`), never the rendered key. Run with
//! `cargo run -p distlock-examples --example metrics --features metrics` (starts its own Redis, or
//! set `REDIS_URL`); the suite runs its test too (`cargo test -p distlock-examples --examples
//! --features metrics`, in scripts/test.sh).

use std::time::Duration;

use distlock::distributed_lock;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

/// The Prometheus recorder with the buckets the operator's kit reads
/// ([`distlock::HISTOGRAM_BUCKETS`]).
fn recorder() -> PrometheusRecorder {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in distlock::HISTOGRAM_BUCKETS {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)
            .expect("buckets are not empty");
    }
    builder.build_recorder()
}

#[derive(Debug)]
struct AppError(#[allow(dead_code)] distlock::Error);

impl From<distlock::Error> for AppError {
    fn from(e: distlock::Error) -> Self {
        AppError(e)
    }
}

/// Settles an order; concurrent calls for the same order wait for each other.
#[distributed_lock(key = "order:<id>", ttl = "10s", renew, wait = "5s")]
async fn settle(id: u64) -> Result<u64, AppError> {
    tokio::time::sleep(Duration::from_millis(50)).await; // the work
    Ok(id)
}

/// Runs on one replica at a time; the others skip.
#[distributed_lock(key = "report:<day>", ttl = "10s", skip)]
async fn report(day: u32) -> Result<Option<u32>, AppError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(Some(day))
}

/// Takes a few locks and returns the Prometheus scrape.
async fn scrape() -> Result<String, AppError> {
    let recorder = recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this process");
    distlock::describe_metrics();

    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());
    distlock::init(url).await?;

    // Order 1 twice at once (the second waits), order 2 once.
    let (a, b, c) = tokio::join!(settle(1), settle(1), settle(2));
    assert_eq!((a?, b?, c?), (1, 1, 2));
    // Two replicas fire the same report: one runs it, the other skips.
    let (x, y) = tokio::join!(report(7), report(7));
    assert_eq!([x?, y?].iter().flatten().count(), 1, "exactly one ran");
    // By hand, with a label, and a wait that runs out.
    let held = distlock::lock("invoice:9")
        .label("invoice:<id>")
        .acquire()
        .await?;
    let timeout = distlock::lock("invoice:9")
        .label("invoice:<id>")
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .expect_err("held");
    assert!(timeout.is_busy());
    held.release().await?;

    Ok(handle.render())
}

#[tokio::main]
async fn main() -> Result<(), AppError> {
    print!("{}", scrape().await?);
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The example runs in the suite: the scrape has the counts of the locks it took, under
    /// their templates.
    #[test]
    fn prints_the_scrape() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let scrape = runtime.block_on(super::scrape()).unwrap();
        print!("{scrape}");
        for series in [
            r#"distlock_acquire_total{lock="order:<id>",kind="lock",outcome="acquired"} 3"#,
            r#"distlock_acquire_total{lock="report:<day>",kind="lock",outcome="acquired"} 1"#,
            r#"distlock_acquire_total{lock="report:<day>",kind="lock",outcome="skipped"} 1"#,
            r#"distlock_acquire_total{lock="invoice:<id>",kind="lock",outcome="acquired"} 1"#,
            r#"distlock_acquire_total{lock="invoice:<id>",kind="lock",outcome="timeout"} 1"#,
            r#"distlock_held{lock="order:<id>",kind="lock"} 0"#,
            r#"distlock_waiting{lock="order:<id>",kind="lock"} 0"#,
            r#"distlock_wait_seconds_count{lock="order:<id>",kind="lock"} 1"#,
            r#"distlock_hold_seconds_count{lock="order:<id>",kind="lock"} 3"#,
            // A histogram (with the kit's buckets), not a summary.
            r#"distlock_hold_seconds_bucket{lock="order:<id>",kind="lock",le="+Inf"} 3"#,
        ] {
            assert!(
                scrape.lines().any(|l| l == series),
                "missing `{series}` in:\n{scrape}"
            );
        }
        assert!(scrape.contains("# HELP distlock_acquire_total "));
        assert!(!scrape.contains("order:1"), "a rendered key became a label");
    }
}
