//! `run`'s release under faults (issue 19, item 5; issue 21): the result is decided when the
//! body completes inside its lease, and `run` sends the release without waiting for its answer
//! (one round trip per call), so a partition that cuts the release off neither holds `run` up
//! nor changes its result; a release that finds the lock another owner's is reported in the
//! background (tracing, `distlock_sent_releases_total`), `run` having returned `Ok`.

use std::sync::Arc;
use std::time::Duration;

use distlock::Client;
use redis::AsyncCommands;
use testkit::proxy::Proxy;
use testkit::{at_rest, RedisServer};
use tokio::time::Instant;

/// Longer than every lease below: a `run` that waited for it would return after the lease.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

async fn client(url: String) -> Client {
    testkit::client_with(url, RESPONSE_TIMEOUT).await
}

fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

#[tokio::test]
async fn a_release_cut_off_by_a_partition_returns_ok_by_the_end_of_the_lease() {
    let server = RedisServer::start();
    let proxy = Proxy::to(&server).await;
    let cut = client(proxy.url()).await;
    let other = client(server.url()).await;
    let ttl = Duration::from_millis(600);

    // The partition starts as the body completes: its release cannot reach Redis.
    let started = Instant::now();
    let out = cut
        .lock("cut")
        .ttl(ttl)
        .run(async {
            proxy.set_blackhole(true);
            7
        })
        .await;
    let took = started.elapsed();
    assert_eq!(
        out.expect("the body completed inside its lease: Ok"),
        7,
        "the body's value"
    );
    assert!(
        took < ttl + Duration::from_millis(250),
        "run returned {took:?} after it started, past its {ttl:?} lease"
    );
    assert!(
        took < RESPONSE_TIMEOUT,
        "run waited for the release's timeout"
    );

    // The lock expires at its ttl: another client takes it then.
    let thief = other
        .lock("cut")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("the lock is free after its ttl");
    assert!(started.elapsed() >= ttl - Duration::from_millis(50));

    // The partition heals: the release still out (and its background retry) reaches Redis late
    // and finds another owner, so it changes nothing.
    proxy.set_blackhole(false);
    at_rest(&[&cut], RESPONSE_TIMEOUT * 3).await;
    thief.ensure_held().expect("the thief still holds the lock");
    thief
        .release()
        .await
        .expect("Redis still had the thief's lock after the late release");
}

#[tokio::test]
async fn the_result_does_not_depend_on_how_long_the_partition_lasts() {
    let server = RedisServer::start();
    let proxy = Arc::new(Proxy::to(&server).await);
    let cut = client(proxy.url()).await;
    let other = client(server.url()).await;
    let mut conn = server.conn().await;
    let ttl = Duration::from_millis(600);

    // Short: the partition heals 100 ms after the body completed, well inside the lease; the
    // release is answered then, and `run` returns once it is (the lock is free).
    let out = cut
        .lock("short")
        .ttl(ttl)
        .run(async {
            proxy.set_blackhole(true);
            let proxy = proxy.clone();
            // The fault schedule: the partition's length.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                proxy.set_blackhole(false);
            });
            7
        })
        .await;
    assert_eq!(out.expect("Ok"), 7);
    // `run` did not wait for the release: it is answered in the background once the partition
    // heals (its first attempt, or a retry inside the lease), and the lock is then free.
    at_rest(&[&cut], RESPONSE_TIMEOUT * 3).await;
    let held: bool = conn.exists(lock_key("short")).await.unwrap();
    assert!(!held, "the release reached Redis once the partition healed");

    // Long: it lasts until another owner took the lock after its ttl, then heals while the
    // release may still be out; the release then answers, late, that the lock is another
    // owner's. Formerly `run` waited for that answer and returned `Err(Lost { Stolen })` for
    // the same body (and `Ok` when the partition outlasted the response timeout).
    let mut thief = None;
    let started = Instant::now();
    let out = cut
        .lock("long")
        .ttl(ttl)
        .run(async {
            proxy.set_blackhole(true);
            let (other, proxy) = (other.clone(), proxy.clone());
            thief = Some(tokio::spawn(async move {
                let guard = other
                    .lock("long")
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(3))
                    .acquire()
                    .await
                    .expect("the lock is free after its ttl");
                proxy.set_blackhole(false);
                guard
            }));
            7
        })
        .await;
    let took = started.elapsed();
    assert_eq!(out.expect("Ok, whatever the release finds later"), 7);
    assert!(took < ttl + Duration::from_millis(250), "{took:?}");
    let thief = thief.expect("the body ran").await.unwrap();
    at_rest(&[&cut], RESPONSE_TIMEOUT * 3).await;
    thief
        .release()
        .await
        .expect("the late release changed nothing");
}

/// Formerly `run` waited for the release and returned `Err(Lost { Stolen })` when it answered,
/// inside the lease, that the lock was another owner's. `run` no longer waits for the release
/// (issue 21): its result is decided when the body completes inside its lease, as it already
/// was when the answer came after the lease's end; what the release finds is reported in the
/// background. The theft itself (a `DEL` by hand while the lease runs, no renewal to notice
/// it) is what a renewed lease or a fencing token catches while the body runs.
#[tokio::test]
async fn a_release_that_finds_another_owner_is_reported_in_the_background() {
    let server = RedisServer::start();
    let (a, b) = (client(server.url()).await, client(server.url()).await);
    let mut admin = server.conn().await;

    let started = Instant::now();
    let mut thief = None;
    let result = a
        .lock("taken")
        .ttl(Duration::from_secs(10))
        .run(async {
            let _: () = admin.del(lock_key("taken")).await.unwrap();
            let taken = b.lock("taken").ttl(Duration::from_secs(10)).acquire().await;
            thief = Some(taken.expect("the lock was free after the delete"));
        })
        .await;
    result.expect("the body completed inside its lease, with no loss reported while it ran");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered at once"
    );
    at_rest(&[&a], RESPONSE_TIMEOUT * 3).await;
    let thief = thief.expect("the body ran");
    thief.ensure_held().expect("b's lease");
    thief
        .release()
        .await
        .expect("the release left b's lock alone");
}
