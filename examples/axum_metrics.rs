//! An axum 0.8 service that serves distlock's lock metrics at `/metrics` for Prometheus
//! (feature `metrics`): what `ops/prometheus/prometheus.yml` scrapes and the operator's kit in
//! `ops/` (rules, alerts, dashboard) reads.
//!
//! The pieces a service needs, all here: `metrics-exporter-prometheus`'s recorder with the
//! histogram buckets the kit reads (`distlock::HISTOGRAM_BUCKETS`: without them the histograms
//! are exported as summaries, which the rules cannot sum), installed as the process's recorder
//! before the first lock; the metrics' descriptions (`distlock::describe_metrics`); the
//! exporter's upkeep, which its `build_recorder` leaves to the application (it drains the
//! histograms: without it they grow); and a `GET /metrics` route that renders the scrape in
//! Prometheus' text format, next to the service's own routes.
//!
//! Run with `cargo run -p distlock-examples --example axum_metrics --features metrics` (starts
//! its own Redis, or set `REDIS_URL`): it serves on a free loopback port, settles a few orders
//! and prints its own `/metrics`. Its test scrapes it over HTTP, and has a real `prometheus`
//! scrape it with the kit's scrape configuration (`ops/prometheus/prometheus.yml`, its targets
//! pointed here) and load the kit's rules.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use distlock::distributed_lock;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How often the exporter's upkeep runs (its own `install` uses 5 s too).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's `metrics` recorder, with the buckets the
/// operator's kit reads, and starts its upkeep on the current runtime. Once per process,
/// before the first lock is taken (metrics recorded before are lost).
fn install_recorder() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in distlock::HISTOGRAM_BUCKETS {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
    }
    let handle = builder.install_recorder()?;
    distlock::describe_metrics();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// `GET /metrics`: the scrape, in Prometheus' text format (version 0.0.4).
async fn metrics(State(handle): State<PrometheusHandle>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
}

/// Settles an order, one request per order at a time across the replicas: every call counts
/// in `distlock_acquire_total{lock="order:<id>",…}` (the template, never `order:42`).
#[distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s")]
async fn settle(Path(id): Path<u64>) -> Result<String, AppError> {
    tokio::time::sleep(Duration::from_millis(20)).await; // the payment provider's call
    Ok(format!("settled order {id}\n"))
}

/// The handler's error: a busy order is 409, anything else 503.
#[derive(Debug)]
struct AppError(distlock::Error);

impl From<distlock::Error> for AppError {
    fn from(error: distlock::Error) -> Self {
        AppError(error)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = if self.0.is_busy() {
            StatusCode::CONFLICT
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, format!("{}\n", self.0)).into_response()
    }
}

/// The service's routes: its own, and `/metrics`.
fn router(handle: PrometheusHandle) -> Router {
    Router::new()
        .route("/orders/{id}/settle", post(settle))
        .route("/metrics", get(metrics))
        .with_state(handle)
}

/// Serves `router` on a free loopback port, in a task: its address.
async fn serve(router: Router) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(address)
}

/// `METHOD path` over a new HTTP/1.1 connection: the status code and the body.
async fn http(method: &str, address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let malformed = || std::io::Error::new(std::io::ErrorKind::InvalidData, response.clone());
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(malformed)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(malformed)?;
    Ok((status, body.to_owned()))
}

/// Installs the recorder and distlock's client (on `REDIS_URL`, or on a redis-server of its
/// own, running while the returned value lives), and serves the service: its address.
async fn start() -> Result<(SocketAddr, Option<testkit::RedisServer>), Box<dyn std::error::Error>> {
    // The recorder first: the locks' metrics from the first one on.
    let handle = install_recorder()?;
    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());
    distlock::init(url).await?;
    Ok((serve(router(handle)).await?, server))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (address, _redis) = start().await?;
    println!("serving on http://{address} (POST /orders/{{id}}/settle, GET /metrics)");
    for id in [1, 1, 2] {
        let (status, body) = http("POST", address, &format!("/orders/{id}/settle")).await?;
        print!("POST /orders/{id}/settle -> {status}: {body}");
    }
    let (status, scrape) = http("GET", address, "/metrics").await?;
    println!("\nGET /metrics -> {status}\n");
    for line in scrape.lines().filter(|l| l.contains("distlock_acquire")) {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use super::*;

    /// The kit's scrape configuration, pointed at `target`, its rule files by their paths in
    /// the repository, scraping and evaluating every second, its Alertmanager on a loopback
    /// port where none listens (nothing leaves the machine).
    fn scrape_config(target: SocketAddr) -> String {
        let ops = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ops/prometheus");
        let config = std::fs::read_to_string(ops.join("prometheus.yml")).unwrap();
        let mut changed = config.clone();
        for (from, to) in [
            ("scrape_interval: 15s", "scrape_interval: 1s".to_owned()),
            (
                "evaluation_interval: 15s",
                "evaluation_interval: 1s".to_owned(),
            ),
            (
                "- targets: ['orders-1:3000', 'orders-2:3000', 'orders-3:3000']",
                format!("- targets: ['{target}']"),
            ),
            (
                "- targets: ['alertmanager:9093']",
                "- targets: ['127.0.0.1:9']".to_owned(),
            ),
            (
                "- distlock.rules.yml",
                format!("- {}", ops.join("distlock.rules.yml").display()),
            ),
            (
                "- distlock.alerts.yml",
                format!("- {}", ops.join("distlock.alerts.yml").display()),
            ),
        ] {
            assert!(
                changed.contains(from),
                "ops/prometheus/prometheus.yml: no `{from}`"
            );
            changed = changed.replace(from, &to);
        }
        changed
    }

    /// The series of an instant query's JSON answer (their label sets, as text).
    fn series(answer: &str) -> Vec<String> {
        assert!(answer.contains(r#""status":"success""#), "{answer}");
        answer
            .split(r#""metric":"#)
            .skip(1)
            .map(|s| s.split('}').next().unwrap().to_owned())
            .collect()
    }

    /// The service runs in the suite: its orders settle, `GET /metrics` answers with the
    /// locks' series under their template (as histograms, with the kit's buckets), and a real
    /// `prometheus` with the kit's scrape configuration scrapes it (`up` 1, the series under
    /// the job `orders`) and loads the kit's rules.
    #[test]
    fn prometheus_scrapes_the_services_metrics_with_the_kits_config() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(30), scenario())
                .await
                .expect("the scenario ends within 30 s")
        });
    }

    async fn scenario() {
        let (address, _redis) = start().await.unwrap();
        for id in [1, 1, 2] {
            let (status, body) = http("POST", address, &format!("/orders/{id}/settle"))
                .await
                .unwrap();
            assert_eq!(status, 200, "{body}");
        }
        let (status, scrape) = http("GET", address, "/metrics").await.unwrap();
        assert_eq!(status, 200, "{scrape}");
        for series in [
            r#"distlock_acquire_total{lock="order:<id>",kind="lock",outcome="acquired"} 3"#,
            r#"distlock_hold_seconds_bucket{lock="order:<id>",kind="lock",le="+Inf"} 3"#,
        ] {
            assert!(
                scrape.lines().any(|l| l == series),
                "missing `{series}` in:\n{scrape}"
            );
        }
        assert!(
            scrape.contains("# HELP distlock_acquire_total "),
            "{scrape}"
        );
        assert!(!scrape.contains("order:1"), "a rendered key became a label");

        let prometheus = testkit::Prometheus::start(&scrape_config(address));
        let started = Instant::now();
        let scraped =
            r#"distlock_acquire_total{job="orders",lock="order:<id>",outcome="acquired"} == 3"#;
        loop {
            let up = series(&prometheus.query(r#"up{job="orders"} == 1"#).await);
            let found = series(&prometheus.query(scraped).await);
            let (status, rules) = prometheus.get("/api/v1/rules").await;
            assert_eq!(status, 200, "{rules}");
            let loaded = rules.contains(r#""name":"distlock.alerts""#)
                && rules.contains(r#""name":"distlock.rules""#);
            if up.len() == 1 && found.len() == 1 && loaded {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "prometheus did not scrape the service within 15 s (up: {up:?}, series: {found:?}, rules loaded: {loaded}); its log:\n{}",
                prometheus.log()
            );
            // The next scrape is a second away.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
