//! A process that returns from `main` right after a locked call leaves no lock behind, with no
//! extra call (issue 32): the releases still in flight when the runtime that made them shuts
//! down are finished before it is gone.
//!
//! Each case runs in a child process (this binary again, [`testkit::ChildTest`]) that
//! does what a `#[tokio::main]` expands to — build a runtime, `block_on` the body, drop the
//! runtime — and then exits. Its client reaches Redis through a delay line (100 ms each way),
//! so every release is still unanswered, most not even written, when the runtime is dropped.
//! The parent then finds no lock key left. The exits that skip the runtime's shutdown
//! (`std::process::exit`) call `distlock::shutdown()` first: the same.

use std::time::Duration;

use distlock::{distributed_lock, Config, Error};
use redis::AsyncCommands;
use testkit::delay::DelayProxy;
use testkit::ChildTest;
use testkit::RedisServer;

/// Tells the child test what to do: `<flavor> <case> <url>`.
const CHILD: &str = "DISTLOCK_SHUTDOWN_CHILD";

/// The delay each way between the child's client and Redis: a release needs 200 ms to be
/// answered, far longer than the child takes to return once its body is done.
const DELAY: Duration = Duration::from_millis(100);

#[distributed_lock(key = "order:<id>", ttl = "60s")]
async fn settle(id: u64) -> Result<u64, Error> {
    Ok(id)
}

/// The child: `main` as `#[tokio::main]` writes it, then the process exits.
#[test]
fn child_main() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let mut parts = spec.splitn(3, ' ');
    let (flavor, case, url) = (
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
    );
    let runtime = match flavor.as_str() {
        "multi_thread" => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build()
    .unwrap();
    runtime.block_on(async move {
        let client = Config::new(url).key_prefix("shut").install().await.unwrap();
        match case.as_str() {
            // The attribute: its release is sent, not waited for.
            "attribute" => assert_eq!(settle(1).await.unwrap(), 1),
            // Many at once: releases queued behind groups in flight.
            "many" => {
                let calls: Vec<_> = (0..32).map(|n| tokio::spawn(settle(n))).collect();
                for call in calls {
                    call.await.unwrap().unwrap();
                }
            }
            // `run`, the manual API's one-trip release.
            "run" => {
                let ran = client.lock("order:run").run(async { 7 }).await.unwrap();
                assert_eq!(ran, 7);
            }
            // A guard dropped, not released: its release goes out in the background.
            "dropped" => drop(client.lock("order:dropped").acquire().await.unwrap()),
            // `process::exit` skips the runtime's shutdown: `distlock::shutdown` first.
            "exit" => {
                assert_eq!(settle(2).await.unwrap(), 2);
                distlock::shutdown().await;
                println!("returning");
                std::process::exit(0);
            }
            other => panic!("unknown case {other}"),
        }
        println!("returning");
    });
    drop(runtime);
}

/// Runs `case` in a child on a runtime of `flavor`; asserts it left no lock key.
async fn leaves_no_lock(flavor: &str, case: &str) {
    let server = RedisServer::start();
    let delay = DelayProxy::to(&server, DELAY);
    let url = delay.url();
    let mut child = ChildTest::spawn("child_main", (CHILD, format!("{flavor} {case} {url}")));
    child.expect("returning", Duration::from_secs(20)).await;
    let status = child.wait(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "{flavor} {case}: the child failed: {status}"
    );
    let mut conn = server.conn().await;
    let left: Vec<String> = conn.keys("shut:{*").await.unwrap();
    assert!(
        left.is_empty(),
        "{flavor} {case}: locks left after the process returned from main: {left:?}"
    );
}

#[tokio::test]
async fn returning_from_main_after_the_attribute_leaves_no_lock() {
    leaves_no_lock("multi_thread", "attribute").await;
    leaves_no_lock("current_thread", "attribute").await;
}

#[tokio::test]
async fn returning_from_main_after_many_calls_leaves_no_lock() {
    leaves_no_lock("multi_thread", "many").await;
}

#[tokio::test]
async fn returning_from_main_after_run_leaves_no_lock() {
    leaves_no_lock("multi_thread", "run").await;
    leaves_no_lock("current_thread", "run").await;
}

#[tokio::test]
async fn returning_from_main_after_dropping_a_guard_leaves_no_lock() {
    leaves_no_lock("multi_thread", "dropped").await;
    leaves_no_lock("current_thread", "dropped").await;
}

#[tokio::test]
async fn exiting_after_distlock_shutdown_leaves_no_lock() {
    leaves_no_lock("multi_thread", "exit").await;
}
