//! Why a held lock was lost, as `LossReason`'s docs (and `ops/README.md`'s runbook) tell it,
//! against a real redis-server: a holder process stalled (`SIGSTOP`) past its lease is told
//! `LeaseElapsed` — nothing failed to reach Redis, the process did not run — while a holder
//! whose renewals go unanswered (the server frozen, or a partition: nothing passes, nothing
//! closes) is told `Unreachable`, whether the response timeout ends the attempts before the
//! lease runs out or the attempt in flight outlives the lease.

use std::time::Duration;

use distlock::{Config, Error, LossReason};
use redis::AsyncCommands;
use testkit::proxy::Proxy;
use testkit::{client_with, eventually, ChildTest, RedisServer};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1000);

/// The holder process: when `LOSS_CHILD` is set (`url`), holds `stall:guard` through a guard and
/// `stall:run` through `run` (both renewed, ttl [`TTL`]), prints `held`, then prints
/// `run: <reason>` and `guard: <reason>` (`LossReason`'s `Debug`) as it is told each is lost.
/// Without the variable (a normal test run) it does nothing.
#[tokio::test]
async fn child_holder() {
    let Ok(url) = std::env::var("LOSS_CHILD") else {
        return;
    };
    let client = Config::new(url).connect().await.unwrap();
    let guard = client
        .lock("stall:guard")
        .ttl(TTL)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    let run = client
        .lock("stall:run")
        .ttl(TTL)
        .renew(true)
        .run(async {
            println!("held");
            std::future::pending::<()>().await
        })
        .await;
    match run {
        Err(Error::Lost { reason, .. }) => println!("run: {reason:?}"),
        other => println!("run ended: {other:?}"),
    }
    let reason = tokio::time::timeout(TTL * 5, guard.lost()).await;
    println!("guard: {:?}", reason.expect("the guard is told"));
}

/// The reason in a child's `<what>: <reason>` line.
fn reason(line: &str) -> &str {
    line.split(": ").nth(1).unwrap_or(line).trim()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_lease_is_told_the_lease_elapsed() {
    let server = RedisServer::start();
    let mut holder = ChildTest::spawn("child_holder", ("LOSS_CHILD", server.url()));
    holder.expect("held", Duration::from_secs(20)).await;
    // Renewed for a while first: the stall comes in the middle of a healthy hold.
    tokio::time::sleep(TTL * 2).await;
    holder.signal("STOP");
    let stopped = Instant::now();
    // Past the lease for certain: both keys expired in Redis (nobody renewed them).
    let conn = server.conn().await;
    eventually(TTL * 5, "the stopped holder's keys expire", || {
        let mut conn = conn.clone();
        async move {
            let left: i64 = conn
                .exists(&["distlock:{stall:guard}", "distlock:{stall:run}"])
                .await
                .unwrap();
            (left == 0).then_some(())
        }
    })
    .await;
    holder.signal("CONT");
    let run = holder.expect("run", Duration::from_secs(5)).await;
    let guard = holder.expect("guard", Duration::from_secs(5)).await;
    eprintln!(
        "stopped {:?}; the child said `{run}`, `{guard}`",
        stopped.elapsed()
    );
    assert_eq!(reason(&run), "LeaseElapsed", "{run}");
    assert_eq!(reason(&guard), "LeaseElapsed", "{guard}");
}

/// A renewed hold of `name` through a client of `url` with `response_timeout`, lost while
/// `cut_off` holds (it cuts the client off from Redis, and undoes that when dropped): the
/// reason it was lost for.
async fn lost_while<C>(
    url: String,
    response_timeout: Duration,
    name: &str,
    cut_off: impl FnOnce() -> C,
) -> LossReason {
    let client = client_with(url, response_timeout).await;
    let guard = client.lock(name).ttl(TTL).renew(true).acquire().await;
    let guard = guard.unwrap();
    // A few renewals answered first.
    tokio::time::sleep(TTL).await;
    let cut = cut_off();
    let reason = tokio::time::timeout(TTL * 3, guard.lost())
        .await
        .expect("the loss is reported within the lease");
    drop(cut);
    // The lost guard's release, sent in the background, is answered now that Redis is back
    // (in milliseconds): settled here, since with the client dropped first this runtime's
    // shutdown waited the whole settle bound (two 10 s response timeouts) for it.
    drop(guard);
    client.settle().await;
    reason
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_unreachable_whatever_the_response_timeout() {
    // The fault kit's server and pause, as a user's test would freeze it.
    let server = distlock::testing::TestRedis::start().unwrap();
    let url = || server.url().to_owned();
    // Renewal attempts time out (and are retried) before the lease runs out.
    let short = lost_while(url(), TTL / 4, "frozen:short", || server.pause()).await;
    assert_eq!(short, LossReason::Unreachable);
    // The attempt in flight outlives the lease: it went unanswered while the process ran.
    let long = lost_while(url(), TTL * 10, "frozen:long", || server.pause()).await;
    assert_eq!(long, LossReason::Unreachable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_unreachable_whatever_the_response_timeout() {
    let server = RedisServer::start();
    let proxy = Proxy::to(&server).await;
    /// Cuts the proxy's traffic until dropped.
    struct Blackhole<'a>(&'a Proxy);
    impl Drop for Blackhole<'_> {
        fn drop(&mut self) {
            self.0.set_blackhole(false);
        }
    }
    let cut = || {
        proxy.set_blackhole(true);
        Blackhole(&proxy)
    };
    let short = lost_while(proxy.url(), TTL / 4, "partition:short", cut).await;
    assert_eq!(short, LossReason::Unreachable);
    let long = lost_while(proxy.url(), TTL * 10, "partition:long", cut).await;
    assert_eq!(long, LossReason::Unreachable);
}
