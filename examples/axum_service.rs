//! An axum 0.8 order service whose handlers take their arguments as axum handlers do
//! (`Path(id): Path<u64>`, `State(app): State<App>`), with the lock key read from the name the
//! pattern binds (`key = "order:<id>"`). Requests for one order are settled one at a time, on
//! every replica; requests for different orders run in parallel; a request that cannot get its
//! order's lock within `wait` is answered `409 Conflict` (the error type maps distlock's errors
//! to statuses).
//!
//! It shuts down as an axum service does: `with_graceful_shutdown` (on Ctrl-C, or here when its
//! requests are answered) lets the requests in flight finish, and `main` returns. Nothing of
//! distlock's to call: the runtime's shutdown waits for the releases the handlers sent.
//!
//! Run with `cargo run -p distlock-examples --example axum_service` (starts its own Redis, or
//! set `REDIS_URL`): it serves on a free loopback port, sends itself a few requests at once and
//! prints their statuses. Its test (in the suite: `cargo test -p distlock-examples --example
//! axum_service`) checks the same over real HTTP, and that the graceful shutdown leaves no
//! lock held.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use distlock::distributed_lock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Settles an order: at most one request per order at a time across every replica; waits up to
/// 2 s for a request already settling it. The fencing token is what the payment provider (or
/// any store that checks it) would be given to refuse a late write.
#[distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s", fenced)]
async fn settle(Path(id): Path<u64>, State(app): State<App>) -> Result<String, AppError> {
    let token = distlock::fence()?.token();
    let _settling = app.enter(id);
    tokio::time::sleep(app.work).await; // the payment provider's call
    Ok(format!("settled order {id} (fencing token {token})\n"))
}

/// The handlers' error: distlock's errors as HTTP statuses.
#[derive(Debug)]
enum AppError {
    /// The order is being settled by another request for longer than `wait`.
    Busy,
    /// Redis could not be reached in time: worth a retry.
    Unavailable(distlock::Error),
    /// Anything else, such as a lock lost while settling: the work must not be trusted.
    Internal(distlock::Error),
}

impl From<distlock::Error> for AppError {
    fn from(error: distlock::Error) -> Self {
        if error.is_busy() {
            AppError::Busy
        } else if error.is_transient() {
            AppError::Unavailable(error)
        } else {
            AppError::Internal(error)
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            AppError::Busy => (
                StatusCode::CONFLICT,
                "this order is being settled by another request; retry later\n".to_owned(),
            ),
            AppError::Unavailable(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n")),
            AppError::Internal(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
        }
        .into_response()
    }
}

/// The service's state: how long a settlement takes, and how many run at once.
#[derive(Clone)]
struct App {
    work: Duration,
    settling: Arc<Settling>,
}

/// Settlements running now and the most seen at once, for all orders and for any one order.
#[derive(Default)]
struct Settling {
    per_order: Mutex<HashMap<u64, usize>>,
    running: AtomicUsize,
    peak: AtomicUsize,
    peak_one_order: AtomicUsize,
}

/// One settlement running, counted until it is dropped (also when its body is cancelled).
struct Entered {
    settling: Arc<Settling>,
    id: u64,
}

impl App {
    fn new(work: Duration) -> App {
        App {
            work,
            settling: Arc::default(),
        }
    }

    fn enter(&self, id: u64) -> Entered {
        let settling = &self.settling;
        let running = settling.running.fetch_add(1, Ordering::SeqCst) + 1;
        settling.peak.fetch_max(running, Ordering::SeqCst);
        let mut per_order = settling.per_order.lock().unwrap();
        let this_order = per_order.entry(id).or_default();
        *this_order += 1;
        settling
            .peak_one_order
            .fetch_max(*this_order, Ordering::SeqCst);
        Entered {
            settling: settling.clone(),
            id,
        }
    }

    /// The most settlements seen running at once: of all orders, and of any one order.
    fn peaks(&self) -> (usize, usize) {
        (
            self.settling.peak.load(Ordering::SeqCst),
            self.settling.peak_one_order.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.settling.running.fetch_sub(1, Ordering::SeqCst);
        let mut per_order = self.settling.per_order.lock().unwrap();
        if let Some(count) = per_order.get_mut(&self.id) {
            *count -= 1;
        }
    }
}

/// The order service, serving in a task until [`Server::stop`] or Ctrl-C.
struct Server {
    address: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Stops accepting, lets the requests in flight finish, and returns once they have.
    async fn stop(self) -> std::io::Result<()> {
        let _ = self.stop.send(());
        self.serving.await?
    }
}

/// Serves the order service on a free loopback port, in a task.
async fn serve(app: App) -> std::io::Result<Server> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let router = Router::new()
        .route("/orders/{id}/settle", post(settle))
        .with_state(app);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        tokio::select! {
            _ = stopped => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let serving = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok(Server {
        address,
        stop,
        serving,
    })
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

/// `POST path` over a new HTTP/1.1 connection: the status code and the body.
async fn http_post(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _redis = connect().await?;
    let app = App::new(Duration::from_millis(800));
    let server = serve(app.clone()).await?;
    let address = server.address;
    println!("serving on http://{address}");

    // Four requests for order 1 at once: settled one after another (800 ms each), so the fourth
    // would start after 2.4 s, past its 2 s wait: 409. Orders 2 and 3 run meanwhile.
    let started = Instant::now();
    let requests = [1, 1, 1, 1, 2, 3].map(|id| {
        tokio::spawn(async move {
            let path = format!("/orders/{id}/settle");
            let response = http_post(address, &path).await;
            (path, response, started.elapsed())
        })
    });
    let mut answers = Vec::new();
    for request in requests {
        let (path, response, elapsed) = request.await?;
        answers.push((elapsed, path, response?));
    }
    answers.sort_by_key(|(elapsed, ..)| *elapsed);
    for (elapsed, path, (status, body)) in answers {
        println!(
            "POST {path} -> {status} after {:>4} ms: {}",
            elapsed.as_millis(),
            body.trim_end()
        );
    }
    let (peak, peak_one_order) = app.peaks();
    println!("settlements at once: {peak} at most, {peak_one_order} at most for one order");
    // Graceful shutdown: the requests in flight finish; returning from `main` then waits for
    // their locks' releases (no distlock call needed).
    server.stop().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example runs in the suite, over real HTTP against a real Redis: one order's
    /// requests serialize, different orders run in parallel, and a request that cannot get its
    /// order within `wait` is answered 409.
    ///
    /// Then the service shuts down gracefully while requests are in flight: they are
    /// answered, and once the runtime is gone (as when `main` returns) no order's lock is left.
    #[test]
    fn orders_serialize_run_in_parallel_and_answer_409_past_the_wait() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let redis = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(20), scenario())
                .await
                .expect("the scenario ends within 20 s")
        });
        drop(runtime);
        if let Some(redis) = redis {
            let mut conn = redis.client().get_connection().unwrap();
            // The orders' locks (their fencing floors, `…:fence`, are kept by design).
            let left: Vec<String> = redis::cmd("KEYS")
                .arg("distlock:{order:*}")
                .query(&mut conn)
                .unwrap();
            assert!(left.is_empty(), "locks left after shutting down: {left:?}");
        }
    }

    async fn settle_all(address: SocketAddr, orders: &[u64]) -> Vec<(u16, String)> {
        let requests = orders.iter().map(|id| {
            let path = format!("/orders/{id}/settle");
            tokio::spawn(async move { http_post(address, &path).await.unwrap() })
        });
        let mut responses = Vec::new();
        for request in requests.collect::<Vec<_>>() {
            responses.push(request.await.unwrap());
        }
        responses
    }

    /// Runs the scenario; the Redis it started (none with `REDIS_URL`).
    async fn scenario() -> Option<testkit::RedisServer> {
        let redis = connect().await.unwrap();
        let app = App::new(Duration::from_millis(150));
        let server = serve(app.clone()).await.unwrap();
        let address = server.address;

        // Four requests for order 1 and one for each of orders 10 to 13, all at once: every one
        // settles, order 1's one at a time (600 ms in all, inside the 2 s wait), the others
        // alongside.
        let responses = settle_all(address, &[1, 10, 1, 11, 1, 12, 1, 13]).await;
        for (status, body) in &responses {
            assert_eq!(*status, 200, "{body}");
            assert!(body.starts_with("settled order "), "{body}");
        }
        let (peak, peak_one_order) = app.peaks();
        assert_eq!(
            peak_one_order, 1,
            "two requests for one order were inside at once"
        );
        assert!(
            peak >= 2,
            "different orders did not run in parallel (peak {peak})"
        );

        // Another replica holds order 3 (the key the template renders for it) past the handler's
        // 2 s wait: order 3 is answered 409 after waiting, while order 4 settles at once.
        let held = distlock::lock("order:3").acquire().await.unwrap();
        let started = Instant::now();
        let other = async {
            let response = http_post(address, "/orders/4/settle").await;
            (response, started.elapsed())
        };
        let (busy, (other, other_took)) =
            tokio::join!(http_post(address, "/orders/3/settle"), other);
        let (status, body) = other.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(
            other_took < Duration::from_millis(1_500),
            "order 4 waited: {other_took:?}"
        );
        let (status, body) = busy.unwrap();
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("being settled by another request"), "{body}");
        assert!(
            started.elapsed() >= Duration::from_millis(1_900),
            "answered 409 before waiting: {:?}",
            started.elapsed()
        );
        held.release().await.unwrap();
        let (status, body) = http_post(address, "/orders/3/settle").await.unwrap();
        assert_eq!(status, 200, "{body}");

        // Graceful shutdown with three requests in flight: each is answered.
        let in_flight: Vec<_> = [20, 21, 22]
            .map(|id| {
                tokio::spawn(
                    async move { http_post(address, &format!("/orders/{id}/settle")).await },
                )
            })
            .into();
        while app.settling.running.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        server.stop().await.unwrap();
        for request in in_flight {
            let (status, body) = request.await.unwrap().unwrap();
            assert_eq!(status, 200, "{body}");
        }
        redis
    }
}
