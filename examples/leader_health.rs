//! A leader's liveness probe in an axum 0.8 service: the service stays a candidate for the
//! `reconciler` election (`LeaderBuilder::serve`), and mounts `GET /livez`, answered `503` while
//! a term this replica led was lost and its body still runs past the grace period — a leader
//! that keeps acting past its lease, which Kubernetes (or any supervisor) should restart, as
//! client-go's `HealthzAdaptor` has it — and `GET /leader`, who leads now.
//!
//! Run with `cargo run -p distlock-examples --example leader_health` (starts its own Redis, or
//! set `REDIS_URL`). Its test (`cargo test -p distlock-examples --example leader_health`) makes
//! the leader's body block its thread while its lock is taken from under it, and checks over
//! real HTTP that the probe fails, then recovers once the body yields and is cancelled.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use distlock::leader::LeaderHealth;
use distlock::Leadership;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The election every replica of the service campaigns for.
const ELECTION: &str = "reconciler";

/// How long a lost term's body may run on before the probe fails.
const GRACE: Duration = Duration::from_millis(300);

#[derive(Clone)]
struct App {
    health: LeaderHealth,
    /// Makes the leader's next step block its thread (the test's stuck leader).
    stuck: Arc<AtomicBool>,
}

/// `GET /livez`: 200 while this replica is not a leader acting past its lease.
async fn livez(State(app): State<App>) -> Result<&'static str, (StatusCode, String)> {
    app.health
        .check()
        .map(|()| "ok\n")
        .map_err(|overdue| (StatusCode::SERVICE_UNAVAILABLE, format!("{overdue}\n")))
}

/// `GET /leader`: the current leader, as every replica sees it.
async fn leader(State(_): State<App>) -> Result<String, (StatusCode, String)> {
    let unavailable = |e: distlock::Error| (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"));
    match distlock::leader(ELECTION)
        .current()
        .await
        .map_err(unavailable)?
    {
        Some(l) => Ok(format!("term {} led by {}\n", l.term, l.identity)),
        None => Ok("no leader\n".to_owned()),
    }
}

/// The leader's work: one reconciliation step every 50 ms for as long as it leads (`serve`
/// cancels it when the term is lost).
async fn reconcile(leadership: Leadership, stuck: Arc<AtomicBool>) {
    loop {
        if stuck.swap(false, Ordering::SeqCst) {
            // A step that blocks its thread (a synchronous call gone slow): `serve` cannot
            // cancel the body until it yields.
            std::thread::sleep(Duration::from_millis(1500));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _fence = leadership.fence(); // ... write through distlock::fence with it ...
    }
}

/// Serves the probe on a free loopback port and campaigns, in tasks; the address.
async fn start(app: App) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let router = Router::new()
        .route("/livez", get(livez))
        .route("/leader", get(leader))
        .with_state(app.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    tokio::spawn(async move {
        let error = distlock::leader(ELECTION)
            .ttl(Duration::from_millis(600))
            .identity(format!("http://{address}"))
            .health(&app.health)
            .serve(|leadership| reconcile(leadership, app.stuck.clone()))
            .await;
        eprintln!("no longer a candidate: {error}");
    });
    Ok(address)
}

/// Installs distlock's client, on `REDIS_URL` or on a redis-server of its own (running while
/// the returned value lives).
async fn connect() -> Result<Option<testkit::RedisServer>, distlock::Error> {
    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());
    distlock::init(url).await?;
    Ok(server)
}

/// `GET path` over a new HTTP/1.1 connection: the status code and the body.
async fn http_get(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let malformed = || std::io::Error::other(format!("not an HTTP response: {response:?}"));
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(malformed)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(malformed)?;
    Ok((status, body.to_owned()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _redis = connect().await?;
    let app = App {
        health: LeaderHealth::new(GRACE),
        stuck: Arc::default(),
    };
    let address = start(app).await?;
    println!("serving on http://{address}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for path in ["/leader", "/livez"] {
        let (status, body) = http_get(address, path).await?;
        println!("GET {path} -> {status}: {}", body.trim_end());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over real HTTP against a real Redis: healthy while leading; a body blocked while its
    /// lock is taken from under it fails the probe (503, naming the election); once the body
    /// yields it is cancelled, the replica leads again, and the probe passes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_probe_fails_while_a_lost_leader_keeps_acting_and_recovers() {
        let redis = connect()
            .await
            .unwrap()
            .expect("the test starts its own Redis");
        let app = App {
            health: LeaderHealth::new(GRACE),
            stuck: Arc::default(),
        };
        let address = start(app.clone()).await.unwrap();
        let leading = |address| async move {
            let (_, body) = http_get(address, "/leader").await.unwrap();
            body.contains(&format!("http://{address}")).then_some(())
        };
        testkit::eventually(Duration::from_secs(5), "leading", || leading(address)).await;
        assert_eq!(http_get(address, "/livez").await.unwrap().0, 200);

        app.stuck.store(true, Ordering::SeqCst);
        // The lock taken from under the blocked leader: its next renewal finds it gone.
        let mut conn = redis.conn().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _: () = redis::cmd("DEL")
            .arg(format!("distlock:{{{ELECTION}}}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        let failing = testkit::eventually(Duration::from_secs(3), "the probe fails", || async {
            let (status, body) = http_get(address, "/livez").await.unwrap();
            (status == 503).then_some(body)
        })
        .await;
        assert!(failing.contains(ELECTION), "{failing}");

        testkit::eventually(Duration::from_secs(5), "the probe passes again", || async {
            (http_get(address, "/livez").await.unwrap().0 == 200).then_some(())
        })
        .await;
        testkit::eventually(Duration::from_secs(5), "leading again", || leading(address)).await;
    }
}
