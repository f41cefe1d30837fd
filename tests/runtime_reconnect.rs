//! A reconnect that a call started on one tokio runtime, left in progress when that runtime
//! shut down, must not break the client for callers on other runtimes (nor panic them).
//!
//! redis-rs's connection manager shares one reconnect future among its callers; its backoff
//! timer belongs to the runtime that first polled it. Once that runtime is gone, polling the
//! timer panics, and the shared future stays poisoned: without a guard every later call on
//! that connection would panic in the caller. And a RedLock client connected on a runtime
//! that ended must work at once from another (its masters' connections live on the client's
//! own runtime). Nor may such a timer panic at all, even caught: the panic's message reaches
//! the user's stderr (redis-rs retries nothing inside the command connection's reconnect, so
//! no backoff timer is left behind).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Duration;

use distlock::{Client, Config};
use testkit::RedisServer;

/// Panics about a runtime being shut down, in this test binary (the hook sees them even when
/// they are caught).
static SHUTDOWN_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_shutdown_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.to_string().contains("being shutdown") {
                SHUTDOWN_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A client of `config` with short timeouts, connected on `on` (a server's command connection
/// is made there).
fn quick_client(config: Config, on: &tokio::runtime::Runtime) -> Client {
    on.block_on(
        config
            .response_timeout(Duration::from_millis(150))
            .connect_timeout(Duration::from_millis(150))
            .connect(),
    )
    .unwrap()
}

/// Whether `client` takes and releases `name` on `on` within about 5 s (Redis coming back).
fn recovers(client: &Client, on: &tokio::runtime::Runtime, name: &str) -> bool {
    on.block_on(async {
        for _ in 0..50 {
            if let Ok(guard) = client.lock(name).acquire().await {
                return guard.release().await.is_ok();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    })
}

fn assert_no_shutdown_panics() {
    assert_eq!(
        SHUTDOWN_PANICS.load(Ordering::SeqCst),
        0,
        "a timer of a runtime that shut down was polled (its panic printed to stderr)"
    );
}

/// Calls `client` once on a short-lived runtime (whose reconnect is left in progress), then
/// at once on `outer`, `rounds` times; every call on `outer` must return (not panic).
fn calls_across_runtimes(
    client: &Client,
    outer: &tokio::runtime::Runtime,
    rounds: usize,
) -> Vec<bool> {
    let mut ok = Vec::new();
    for round in 0..rounds {
        let inner = runtime();
        let name = format!("reconnect:{round}");
        inner.block_on(async {
            if let Ok(guard) = client.lock(format!("inner:{round}")).acquire().await {
                let _ = guard.release().await;
            }
        });
        drop(inner);
        let client = client.clone();
        let joined = outer.block_on(outer.spawn(async move {
            match client.lock(name.as_str()).acquire().await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            }
        }));
        ok.push(joined.expect("a call on another runtime panicked"));
    }
    ok
}

#[test]
fn a_reconnect_left_by_a_runtime_that_ended_does_not_break_a_standalone_client() {
    count_shutdown_panics();
    let mut server = RedisServer::start();
    let outer = runtime();
    let client = quick_client(Config::new(server.url()), &outer);
    server.kill();
    calls_across_runtimes(&client, &outer, 20);
    server.restart();
    assert!(
        recovers(&client, &outer, "reconnect:back"),
        "the client did not recover once Redis was back"
    );
    assert_no_shutdown_panics();
}

#[test]
fn a_reconnect_left_by_a_runtime_that_ended_does_not_break_a_quorum() {
    count_shutdown_panics();
    let mut masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let outer = runtime();
    let client = quick_client(
        Config::redlock(masters.iter().map(RedisServer::url)),
        &outer,
    );
    masters[0].kill();
    let ok = calls_across_runtimes(&client, &outer, 20);
    assert!(
        ok.iter().all(|&ok| ok),
        "with 2 of 3 masters up every call must succeed: {ok:?}"
    );
    assert_no_shutdown_panics();
}

#[test]
fn a_quorum_connected_on_a_runtime_that_ended_works_at_once_from_another() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let connecting = runtime();
    let client = connecting
        .block_on(
            Config::redlock(masters.iter().map(RedisServer::url))
                .response_timeout(Duration::from_millis(500))
                .connect(),
        )
        .unwrap();
    drop(connecting);
    let outer = runtime();
    let ok = outer.block_on(async {
        let guard = client.lock("after-connect").acquire().await?;
        guard.release().await
    });
    assert!(
        ok.is_ok(),
        "the first call after the connecting runtime ended failed: {ok:?}"
    );
}

#[test]
fn a_client_whose_connecting_runtime_ended_mid_reconnect_recovers_without_a_panic() {
    count_shutdown_panics();
    let mut server = RedisServer::start();
    // The command connection is made on the connecting runtime, and redis-rs runs its
    // reconnects there.
    let connecting = runtime();
    let client = quick_client(Config::new(server.url()), &connecting);
    server.kill();
    connecting.block_on(async {
        // Fails, starting a reconnect that cannot connect (Redis is down).
        assert!(client.lock("mid-reconnect").acquire().await.is_err());
    });
    drop(connecting);
    server.restart();
    assert!(
        recovers(&client, &runtime(), "mid-reconnect"),
        "the client did not recover from another runtime"
    );
    assert_no_shutdown_panics();
}
