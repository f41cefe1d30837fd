//! The default client must not depend on the tokio runtime that called `distlock::init`
//! (issue #8, defect 10).
//!
//! Every test here shares one redis-server and one `distlock::init`. The first test to need
//! them starts the server and runs `init` on a runtime of its own (also renewing a lock and
//! waiting for one there, so everything the client starts lazily is started on it); that
//! runtime is shut down before any test goes on. The tests then renew, wait for and drop locks
//! from their own `#[tokio::test]` runtimes, each on its own lock names: renewal must go on
//! across several renewal periods, a waiter must be woken by the release message, and a dropped
//! guard must still be released in the background.

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use distlock::Client;
use redis::AsyncCommands;
use testkit::{eventually, RedisServer};
use tokio::time::Instant;

/// Renewed locks here: a 600 ms ttl is renewed every 200 ms.
const TTL: Duration = Duration::from_millis(600);
/// How long the tests hold a renewed lock: more than two renewal periods and two ttls.
const HOLD: Duration = Duration::from_millis(1500);

struct Shared {
    server: RedisServer,
    /// The client `distlock::init` installed (for its diagnostics counters).
    client: Client,
    /// Lives (with its stdin open) as long as this process; see [`reaper`].
    _reaper: Child,
}

/// The shared server and default client. The first caller starts them and runs `init` on a
/// runtime that is shut down before this returns; concurrent callers wait for it (`OnceLock`).
fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let server = RedisServer::start();
        let reaper = reaper(server.pid());
        let url = server.url();
        let client = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = rt.block_on(async {
                let client = distlock::init(url).await.expect("init");
                // Renewal and the release subscriber, started while this runtime lives.
                distlock::lock("init:renewed")
                    .ttl(TTL)
                    .renew(true)
                    .acquire()
                    .await
                    .unwrap()
                    .release()
                    .await
                    .unwrap();
                let holder = distlock::lock("init:wait").acquire().await.unwrap();
                let waiter = tokio::spawn(
                    distlock::lock("init:wait")
                        .wait(Duration::from_secs(5))
                        .acquire(),
                );
                eventually(Duration::from_secs(5), "init waiter subscribed", || {
                    let client = client.clone();
                    async move { (client.waiting_channels() == 1).then_some(()) }
                })
                .await;
                holder.release().await.unwrap();
                waiter.await.unwrap().unwrap().release().await.unwrap();
                client
            });
            // The runtime that called `init` shuts down here, with every task spawned on it.
            drop(rt);
            client
        })
        .join()
        .expect("init thread");
        Shared {
            server,
            client,
            _reaper: reaper,
        }
    })
}

/// Statics are never dropped, so the shared server would outlive this test process: a `sh`
/// child waits for EOF on its stdin (kept open by the returned `Child`), which the OS delivers
/// when this process exits, and then kills the server.
fn reaper(pid: u32) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("read line; kill -9 {pid}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sh")
}

fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

#[tokio::test]
async fn renewed_lock_outlives_the_runtime_that_called_init() {
    // Defect 10: renewal ran on the init runtime and died with it; the lease lapsed.
    let shared = shared();
    let mut conn = shared.server.conn().await;
    let guard = distlock::lock("ri:renewed")
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .expect("acquire after the init runtime is gone");
    tokio::time::sleep(HOLD).await;
    if let Err(e) = guard.ensure_held() {
        panic!("a renewed lock was lost after {HOLD:?}: {e}");
    }
    let pttl: i64 = conn.pttl(lock_key("ri:renewed")).await.unwrap();
    assert!(pttl > 0, "pttl {pttl}");
    guard.release().await.expect("release");
    let held: bool = conn.exists(lock_key("ri:renewed")).await.unwrap();
    assert!(!held);
}

#[tokio::test]
async fn waiting_acquire_is_woken_after_the_runtime_that_called_init_is_gone() {
    // Defect 10: the client (renewal, release subscriber) depended on the init runtime.
    let shared = shared();
    let conn = shared.server.conn().await;
    let renewed = distlock::lock("ri:wait-renewed")
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .expect("acquire after the init runtime is gone");
    let started = Instant::now();
    // A long lease, so only the release message (not the ttl re-check) can wake the waiter.
    let holder = distlock::lock("ri:wait")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(
        distlock::lock("ri:wait")
            .wait(Duration::from_secs(5))
            .acquire(),
    );
    eventually(Duration::from_secs(5), "waiter subscribed", || {
        let mut conn = conn.clone();
        async move {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .query_async(&mut conn)
                .await
                .unwrap();
            channels
                .iter()
                .any(|c| c == "distlock:{ri:wait}:released")
                .then_some(())
        }
    })
    .await;
    tokio::time::sleep_until(started + HOLD).await;
    if let Err(e) = renewed.ensure_held() {
        panic!("a renewed lock was lost after {HOLD:?}: {e}");
    }
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    holder.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter finished")
        .unwrap()
        .expect("the waiter takes the released lock");
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken by the release message, not after {:?}",
        released.elapsed()
    );
    taken.release().await.unwrap();
    renewed.release().await.expect("release");
}

#[tokio::test]
async fn dropped_guard_is_released_after_the_runtime_that_called_init_is_gone() {
    // Defect 10: the client (renewal, background release) depended on the init runtime.
    let shared = shared();
    let conn = shared.server.conn().await;
    let guard = distlock::lock("ri:dropped")
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .expect("acquire after the init runtime is gone");
    tokio::time::sleep(HOLD).await;
    if let Err(e) = guard.ensure_held() {
        panic!("a renewed lock was lost after {HOLD:?}: {e}");
    }
    drop(guard);
    let client = shared.client.clone();
    eventually(
        Duration::from_secs(5),
        "background release finished and the key is gone",
        || {
            let (client, mut conn) = (client.clone(), conn.clone());
            async move {
                let held: bool = conn.exists(lock_key("ri:dropped")).await.unwrap();
                (client.background_tasks() == 0 && !held).then_some(())
            }
        },
    )
    .await;
}
