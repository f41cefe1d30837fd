//! The metrics example's equivalent under load: distlock's metrics recorded by
//! `metrics-exporter-prometheus` with the kit's buckets, served on a free loopback port for a
//! real `prometheus` to scrape, while tasks take locks so that every series the dashboard and
//! the rules read gets samples: contention (waits, `busy`, `timeout`), renewed holds, a
//! permit, a lock lost and a leader's term lost (each once Prometheus has its loss series at 0),
//! a transient failure retried; and the holds the kit must tell apart: a leader leading for
//! good and a plain lock held as long, both past 100 ttls within seconds (ttl 100 ms).

use std::future::Future;
use std::time::Duration;

use distlock::{Client, Config};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use redis::AsyncCommands;
use testkit::proxy::{Proxy, ReplyFault};
use testkit::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Installs the Prometheus recorder as the process's recorder (once: this test binary's only).
pub(crate) fn install_recorder() -> PrometheusHandle {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in distlock::HISTOGRAM_BUCKETS {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)
            .unwrap();
    }
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test process");
    distlock::describe_metrics();
    handle
}

/// Serves the scrape (`handle.render()`) to any GET on a free loopback port: the port, and the
/// task (aborted when dropped by the caller's `Load`).
pub(crate) async fn serve(handle: PrometheusHandle) -> (u16, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                // The request's head (a GET has no body); its path does not matter.
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = handle.render();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, task)
}

/// The load's tasks, aborted when dropped.
pub(crate) struct Load {
    tasks: Vec<JoinHandle<()>>,
    client: Client,
}

impl Drop for Load {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn client(url: String) -> Client {
    Config::new(url).connect().await.expect("connect")
}

/// The plain acquire's `SET <lock> <value> NX PX <ms> GET` (the first command of its pipeline).
fn is_acquire(args: &[Vec<u8>]) -> bool {
    let has = |word: &[u8]| args[3..].iter().any(|a| a.eq_ignore_ascii_case(word));
    args.len() > 3 && args[0].eq_ignore_ascii_case(b"SET") && has(b"NX") && has(b"GET")
}

/// The ttl of the long holds: 100 of them pass in 10 s.
const LONG_TTL: Duration = Duration::from_millis(100);

impl Load {
    /// Starts the steady load on `server`, then makes a one-off event (a retry), awaited until
    /// it happened.
    pub(crate) async fn start(server: &RedisServer) -> Load {
        let (a, b) = (client(server.url()).await, client(server.url()).await);
        let mut tasks = Vec::new();
        // Three tasks on two orders, waiting for each other: waits, holds, sent releases.
        for n in 0..3u32 {
            let c = if n % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                loop {
                    let lock = c.lock(format!("order:{}", n % 2)).label("order:<id>");
                    let work = tokio::time::sleep(Duration::from_millis(20));
                    let _ = lock.wait(Duration::from_secs(2)).run(work).await;
                }
            }));
        }
        // Attempts that find the orders busy, at once or after a short wait.
        let c = b.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0u64.. {
                let lock = c.lock(format!("order:{}", n % 2)).label("order:<id>");
                let lock = match n % 3 {
                    0 => lock.wait(Duration::from_millis(5)),
                    _ => lock,
                };
                if let Ok(guard) = lock.acquire().await {
                    let _ = guard.release().await;
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        }));
        // A renewed job holding for over 3 ttls, again and again: renewals, their margins, the
        // hold's age in ttls.
        let c = a.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let lock = c.lock("job:nightly").label("job:<name>");
                let lock = lock.ttl(Duration::from_millis(300)).renew(true);
                let _ = lock.run(tokio::time::sleep(Duration::from_secs(1))).await;
            }
        }));
        // A semaphore's permits.
        let c = b.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let permit = c.semaphore("api:partner", 2).label("api:<partner>");
                let _ = permit
                    .run(tokio::time::sleep(Duration::from_millis(30)))
                    .await;
            }
        }));
        // Held for good, renewed every third of 100 ms: a healthy leader of `keeper` and a
        // plain lock of `stuck:<n>`.
        let leading = b.leader("keeper").ttl(LONG_TTL).campaign().await.unwrap();
        let stuck = a
            .lock("stuck:1")
            .label("stuck:<n>")
            .ttl(LONG_TTL)
            .renew(true);
        let stuck = stuck.acquire().await.unwrap();
        tasks.push(tokio::spawn(async move {
            let _held = (leading, stuck);
            std::future::pending::<()>().await;
        }));
        retry_a_transient_failure(server, &a).await;
        Load { tasks, client: a }
    }

    /// A renewed lock of `lease:<n>` is taken, and its key deleted once `scraped` (its loss
    /// series, at 0, seen by Prometheus): lost (`expired`) at the next renewal.
    pub(crate) async fn lose_a_lock(
        &self,
        server: &RedisServer,
        scraped: impl Future<Output = ()>,
    ) {
        let lock = self.client.lock("lease:1").label("lease:<n>");
        let guard = lock.ttl(Duration::from_millis(300)).renew(true).acquire();
        let guard = guard.await.unwrap();
        scraped.await;
        let _: () = server.conn().await.del("distlock:{lease:1}").await.unwrap();
        let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
        lost.expect("the loss is found by the next renewal");
    }

    /// A leader of `scheduler` is elected, and its lock deleted once `scraped` (its loss series,
    /// at 0, seen by Prometheus): its term is lost (`expired`, counted when its leadership is
    /// dropped); then a task leads again for good (the gauge at 1).
    pub(crate) async fn lose_a_term(
        &mut self,
        server: &RedisServer,
        scraped: impl Future<Output = ()>,
    ) {
        let c = self.client.clone();
        let campaign = || {
            c.leader("scheduler")
                .ttl(Duration::from_millis(300))
                .campaign()
        };
        let leading = campaign().await.unwrap();
        scraped.await;
        let _: () = server
            .conn()
            .await
            .del("distlock:{scheduler}")
            .await
            .unwrap();
        let lost = tokio::time::timeout(Duration::from_secs(5), leading.lost()).await;
        lost.expect("the leader is told");
        drop(leading);
        let leading = campaign().await.unwrap();
        self.tasks.push(tokio::spawn(async move {
            let _leading = leading;
            std::future::pending::<()>().await;
        }));
    }
}

/// A waiter whose acquire replies are reset (through a fault proxy): its attempt and the
/// attempt's own retry with the same value, then a transient failure that the wait retries
/// after a pause, counted; then the lock when it is released.
async fn retry_a_transient_failure(server: &RedisServer, holder: &Client) {
    let proxy = Proxy::to(server).await;
    let waiter = client(proxy.url()).await;
    let held = holder.lock("retry:1").label("retry:<n>").acquire().await;
    let held = held.unwrap();
    proxy.fault_next_replies(2, ReplyFault::Reset, is_acquire);
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("retry:1").label("retry:<n>");
        lock.wait(Duration::from_secs(5)).acquire().await
    });
    assert!(proxy.wait_faulted(2, Duration::from_secs(5)).await);
    held.release().await.unwrap();
    let taken = waiting.await.unwrap().expect("taken after the retry");
    taken.release().await.unwrap();
}
