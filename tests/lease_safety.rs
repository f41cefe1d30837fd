//! Lease safety regressions (issue #8), against a real redis-server: a renewal never shortens a
//! key's expiry; `run` never reports success for a body whose lease was lost (stalled executor,
//! a lease that elapsed before the body's first poll, a key taken during a renewed body; a key
//! taken during a body without renewal is reported by the release, in the background); a release
//! after the lease elapsed is an error; re-entry never re-creates a lost lock; no duration
//! (`Duration::MAX` anywhere) panics; one bad key does not break a renewal batch; a lock key
//! without a ttl does not make waiters poll; a corrupt fence is never overwritten; `Busy` reports
//! zero waiting without `wait`; ttls below the documented minimum are refused.
//!
//! The last section needs API that is new with the fixes: `LossReason::Refused` (Redis answered
//! a renewal with an error), `Config::require_noeviction` / `Error::EvictionPolicy` and
//! `distlock::MIN_TTL`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Config, Error, LossReason};
use redis::AsyncCommands;
use testkit::{command_calls, take_and_release, RedisServer};
use tokio::time::Instant;

/// A separate client: every client is a different owner.
async fn client(server: &RedisServer) -> Client {
    Config::new(server.url()).connect().await.expect("connect")
}

/// The Redis key of the lock hash named `name` (default prefix).
fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

async fn exists(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    conn.exists(key).await.unwrap()
}

#[tokio::test]
async fn inner_renewal_never_shortens_the_outer_lease() {
    // Defect 1: a renewed re-entry with a shorter ttl cut the outer lock's expiry to its own ttl.
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let key = lock_key("nest");
    let started = Instant::now();
    a.lock("nest")
        .ttl(Duration::from_secs(6))
        .run(async {
            // The inner body outlives one renewal interval (ttl/3), so the watchdog renews the
            // inner hold at least once before it is released.
            a.lock("nest")
                .ttl(Duration::from_secs(1))
                .renew(true)
                .run(tokio::time::sleep(Duration::from_millis(600)))
                .await
                .expect("re-entry inside the outer body");
            // Well past the inner ttl, well inside the outer 6 s lease.
            tokio::time::sleep(Duration::from_millis(2500)).await;
            if let Ok(thief) = b.lock("nest").acquire().await {
                panic!(
                    "another client took the lock {:?} into the outer 6 s lease (token {:?})",
                    started.elapsed(),
                    thief.token()
                );
            }
            let pttl: i64 = conn.pttl(&key).await.unwrap();
            assert!(
                pttl > 2000,
                "{:?} into a 6 s lease the key expires in {pttl} ms",
                started.elapsed()
            );
        })
        .await
        .expect("the outer body finishes inside its lease");
}

#[tokio::test]
async fn capped_renewal_never_leaves_the_key_expiring_before_the_guaranteed_lease() {
    // Defect 1: the last renewal before the hold cap shortened the key below the holder's lease.
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let key = lock_key("cap");
    let started = Instant::now();
    let guard = a
        .lock("cap")
        .ttl(Duration::from_secs(3))
        .renew(true)
        .max_hold(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let mut samples = 0;
    while guard.ensure_held().is_ok() && started.elapsed() < Duration::from_secs(6) {
        // Redis must keep the key at least as long as the holder believes it holds the lock.
        let promised = guard.guaranteed_until();
        let pttl: i64 = conn.pttl(&key).await.unwrap();
        let now = Instant::now();
        // Skip a sample that a renewal reply moved (the promise only grows).
        if guard.guaranteed_until() == promised {
            let left = promised.saturating_duration_since(now).as_millis() as i64;
            assert!(
                pttl >= left - 5,
                "{:?} after acquiring, the holder is guaranteed {left} ms more but the key \
                 expires in {pttl} ms",
                started.elapsed()
            );
        }
        // And nobody else can take the lock while the holder believes it holds it.
        match b.lock("cap").acquire().await {
            Err(e) => assert!(e.is_busy(), "{e}"),
            Ok(thief) => {
                let at = Instant::now();
                let promised = guard.guaranteed_until();
                thief.release().await.unwrap();
                assert!(
                    promised <= at,
                    "another client took the lock {:?} after acquiring, {:?} before the holder's \
                     guaranteed lease ended",
                    started.elapsed(),
                    promised - at
                );
            }
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(samples > 5, "only {samples} samples");
    assert!(
        guard.ensure_held().is_err(),
        "the 2 s hold cap ends a 3 s lease within 6 s"
    );
}

#[tokio::test]
async fn run_after_a_stall_past_the_lease_returns_lost() {
    // Defect 2: a body that finished after its lease elapsed (executor stalled) returned Ok.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;

    // Control: a body that finishes inside its lease returns its value and releases the lock.
    let out = c
        .lock("stall")
        .ttl(Duration::from_secs(5))
        .run(async { 7 })
        .await
        .unwrap();
    assert_eq!(out, 7);
    // `run` sent its release without waiting: another connection sees it once it is answered.
    c.settle().await;
    assert!(!exists(&mut conn, &lock_key("stall")).await);

    // Another client on its own OS thread and runtime, so it runs while this executor is blocked.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let url = server.url();
    let other = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let other = rt.block_on(Config::new(url).connect()).expect("connect");
        ready_tx.send(()).unwrap();
        go_rx.recv().expect("the body started");
        rt.block_on(async {
            let guard = other
                .lock("stall")
                .wait(Duration::from_secs(2))
                .acquire()
                .await?;
            guard.release().await
        })
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the other client connected");

    let result = c
        .lock("stall")
        .ttl(Duration::from_millis(300))
        .run(async move {
            go_tx.send(()).unwrap();
            // Blocks the only executor thread past the 300 ms lease: a stall with no await point.
            std::thread::sleep(Duration::from_millis(900));
            7
        })
        .await;
    let took = other.join().expect("other client thread");
    took.expect("the other client took the lock once the stalled holder's lease ran out");
    match result {
        Err(e) => assert!(e.is_lost(), "{e}"),
        Ok(v) => panic!(
            "run returned Ok({v}) although the lease elapsed during the body and another client \
             held the lock meanwhile"
        ),
    }
}

#[tokio::test]
async fn a_body_whose_lease_elapsed_before_its_first_poll_does_not_start() {
    // Defect 2: a body was started although its lease had already elapsed.
    let server = RedisServer::start();
    let c = client(&server).await;
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    // On this single-threaded runtime the acquire sends its request on the first poll; the
    // second branch then blocks the executor for 600 ms, so the reply (sent at once by Redis) is
    // read only after the 200 ms lease has elapsed.
    let (result, ()) = tokio::join!(
        c.lock("late")
            .ttl(Duration::from_millis(200))
            .run(async move { flag.store(true, Ordering::SeqCst) }),
        async {
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(600));
        }
    );
    assert!(
        !started.load(Ordering::SeqCst),
        "the body started although its lease had elapsed (run returned {result:?})"
    );
    let err = result.unwrap_err();
    assert!(err.is_lost(), "{err}");
}

#[tokio::test]
async fn release_after_the_local_lease_elapsed_is_an_error() {
    // Defect 2: release() returned Ok for a guard whose lease had already elapsed.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let key = lock_key("rel");

    // The ttl elapsed and Redis expired the key.
    let g = c
        .lock("rel")
        .ttl(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let released = g.release().await;
    assert!(released.is_err(), "{released:?}");

    // The key outlives the holder's lease (extended by hand here; a slow Redis clock or a late
    // reply does the same): the holder's lease still elapsed, so release cannot report success.
    let g = c
        .lock("rel")
        .ttl(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(5000)
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(g.lost_reason().is_some(), "the 200 ms lease elapsed");
    let released = g.release().await;
    assert!(
        released.is_err(),
        "release after the lease elapsed returned {released:?}"
    );
}

/// Defect 2 was: `run` returned `Ok` while another client held the lock when the body ended,
/// and its release then deleted the new holder's lock. The release is owner-checked, so it
/// leaves the new holder's lock alone; and since issue 21 the result is decided when the body
/// completes (the release is sent, not waited for): a theft nothing reported while the body
/// ran (a `DEL` by hand of a lock without renewal, outside what Redis must provide) is
/// reported by the release in the background (tracing, `distlock_sent_releases_total`), as it
/// already was when its answer came after the lease's end. A renewed lease reports it while
/// the body runs (next test); fencing keeps the stale holder's writes out either way.
#[tokio::test]
async fn run_leaves_the_new_holders_lock_alone_when_the_lock_was_taken_during_the_body() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let key = lock_key("taken");
    let mut thief = None;
    let mut thief_owner = String::new();
    let result = a
        .lock("taken")
        .ttl(Duration::from_secs(5))
        .run(async {
            // Someone deletes the lock and another client takes it; the lease has not elapsed.
            let _: () = conn.del(&key).await.unwrap();
            thief = Some(b.lock("taken").acquire().await.expect("free after DEL"));
            thief_owner = conn.get(&key).await.unwrap();
        })
        .await;
    let thief = thief.expect("the body ran");
    result.expect("decided when the body completed: nothing reported a loss while it ran");
    testkit::at_rest(&[&a], Duration::from_secs(5)).await;
    // The first holder's release changed nothing of the new holder's lock.
    assert!(thief.ensure_held().is_ok());
    let owner: String = conn.get(&key).await.unwrap();
    assert_eq!(owner, thief_owner);
    thief.release().await.unwrap();
}

/// With renewal, a lock taken from under the body is reported while the body runs: the body
/// is stopped and `run` returns `Err(Lost)`.
#[tokio::test]
async fn run_with_renewal_returns_lost_when_the_lock_was_taken_during_the_body() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let key = lock_key("taken-renewed");
    let mut thief = None;
    let result = a
        .lock("taken-renewed")
        .ttl(Duration::from_millis(600))
        .renew(true)
        .run(async {
            let _: () = conn.del(&key).await.unwrap();
            thief = Some(
                b.lock("taken-renewed")
                    .ttl(Duration::from_secs(10))
                    .acquire()
                    .await
                    .expect("free after DEL"),
            );
            // Longer than a renewal period: the watchdog finds the lock another owner's.
            std::future::pending::<()>().await;
        })
        .await;
    match result {
        Err(e) => assert!(e.is_lost(), "{e}"),
        Ok(()) => panic!("the body never completes: only a loss ends it"),
    }
    let thief = thief.expect("the body ran");
    testkit::at_rest(&[&a], Duration::from_secs(5)).await;
    assert!(thief.ensure_held().is_ok());
    thief.release().await.unwrap();
}

#[tokio::test]
async fn reentry_does_not_recreate_a_lost_lock() {
    // Defect 3: re-entry after the outer lock was lost re-created it under the outer owner.
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    let key = lock_key("re");
    let result = a
        .lock("re")
        .ttl(Duration::from_secs(5))
        .run(async {
            let _: () = conn.del(&key).await.unwrap();
            take_and_release(&b, "re").await;
            let err = a
                .lock("re")
                .acquire()
                .await
                .expect_err("re-entry re-created a lock its outer hold had lost");
            assert!(err.is_lost(), "{err}");
        })
        .await;
    let err = result.expect_err("the outer body lost its lock");
    assert!(err.is_lost(), "{err}");
    assert!(
        !exists(&mut conn, &key).await,
        "the outer owner re-created the lock"
    );
}

#[tokio::test]
async fn wait_duration_max_does_not_panic() {
    // Defect 4: `wait(Duration::MAX)` overflowed an Instant.
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let g = tokio::time::timeout(
        Duration::from_secs(5),
        a.lock("w").wait(Duration::MAX).acquire(),
    )
    .await
    .expect("a free lock is taken at once")
    .unwrap();
    g.release().await.unwrap();
    // Held by a holder that never releases nor renews: taken when its 300 ms lease runs out.
    let held = b
        .lock("w")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let g = tokio::time::timeout(
        Duration::from_secs(5),
        a.lock("w").wait(Duration::MAX).acquire(),
    )
    .await
    .expect("taken once the holder's lease ran out")
    .unwrap();
    g.release().await.unwrap();
    drop(held);
}

#[tokio::test]
async fn min_hold_duration_max_does_not_panic() {
    // Defect 4: `min_hold(Duration::MAX)` overflowed an Instant.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    match c.lock("mh").min_hold(Duration::MAX).acquire().await {
        Ok(g) => g.release().await.unwrap(),
        Err(e) => {
            assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
            assert!(!exists(&mut conn, &lock_key("mh")).await);
        }
    }
}

#[tokio::test]
async fn max_hold_duration_max_does_not_panic() {
    // Defect 4: `max_hold(Duration::MAX)` overflowed an Instant.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let acquired = c
        .lock("xh")
        .renew(true)
        .max_hold(Duration::MAX)
        .acquire()
        .await;
    match acquired {
        Ok(g) => g.release().await.unwrap(),
        Err(e) => {
            assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
            assert!(!exists(&mut conn, &lock_key("xh")).await);
        }
    }
}

#[tokio::test]
async fn ttl_duration_max_is_invalid_config() {
    // Defect 4: `ttl(Duration::MAX)` overflowed (or reached Redis as a wrapped number).
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let err = c.lock("t").ttl(Duration::MAX).acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(!exists(&mut conn, &lock_key("t")).await);
}

/// Connects with `config`: either refused as invalid, or usable for a lock with its defaults.
async fn usable_or_invalid(config: Config, what: &str) {
    match config.connect().await {
        Ok(c) => {
            // Fenced, so the fence retention is used too.
            let g = c
                .lock(what)
                .fenced(true)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{what}: connected, but no lock can be taken: {e}"));
            g.release().await.unwrap();
        }
        Err(e) => assert!(matches!(e, Error::InvalidConfig { .. }), "{what}: {e}"),
    }
}

#[tokio::test]
async fn config_default_ttl_max_does_not_panic() {
    // Defect 4: `Config::default_ttl(Duration::MAX)` was accepted and overflowed on acquire.
    let server = RedisServer::start();
    let config = Config::new(server.url()).default_ttl(Duration::MAX);
    usable_or_invalid(config, "default_ttl").await;
}

#[tokio::test]
async fn config_connect_timeout_max_does_not_panic() {
    // Defect 4: `Config::connect_timeout(Duration::MAX)` overflowed on connect.
    let server = RedisServer::start();
    let config = Config::new(server.url()).connect_timeout(Duration::MAX);
    usable_or_invalid(config, "connect_timeout").await;
}

#[tokio::test]
async fn config_response_timeout_max_does_not_panic() {
    // Defect 4: `Config::response_timeout(Duration::MAX)` overflowed on connect.
    let server = RedisServer::start();
    let config = Config::new(server.url()).response_timeout(Duration::MAX);
    usable_or_invalid(config, "response_timeout").await;
}

#[tokio::test]
async fn config_fence_retention_max_does_not_panic() {
    // Defect 4: `Config::fence_retention(Duration::MAX)` reached Redis as a wrapped number.
    let server = RedisServer::start();
    let config = Config::new(server.url()).fence_retention(Duration::MAX);
    usable_or_invalid(config, "fence_retention").await;
}

#[tokio::test]
async fn one_bad_key_does_not_break_a_renewal_batch() {
    // Defect 6: one failing key failed the whole renewal batch, and every lease in it was lost.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let names = ["batch:1", "batch:2", "batch:3"];
    let mut guards = Vec::new();
    let mut owners = Vec::new();
    for name in names {
        guards.push(
            c.lock(name)
                .ttl(Duration::from_millis(600))
                .renew(true)
                .acquire()
                .await
                .unwrap(),
        );
        let owner: String = conn.get(lock_key(name)).await.unwrap();
        owners.push(owner);
    }
    // Someone overwrites one lock key with a plain string: renewing it fails with WRONGTYPE.
    let _: () = conn.set(lock_key("batch:2"), "x").await.unwrap();
    // More than two renewal periods.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for i in [0, 2] {
        let name = names[i];
        guards[i]
            .ensure_held()
            .unwrap_or_else(|e| panic!("{name} was renewed in a batch with a bad key: {e}"));
        let owner: Option<String> = conn.get(lock_key(name)).await.unwrap();
        assert_eq!(owner.as_ref(), Some(&owners[i]), "{name} is still ours");
    }
    assert!(
        guards[1].lost_reason().is_some(),
        "the overwritten lock is reported lost"
    );
}

#[tokio::test]
async fn a_lock_key_without_ttl_does_not_make_waiters_poll() {
    // Defect 9: a lock without a ttl (PTTL -1) made a waiter retry every millisecond.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    // A lock value of this protocol, but without an expiry.
    let _: () = conn
        .set(lock_key("nottl"), "d2:someone-else")
        .await
        .unwrap();
    let before = command_calls(&mut conn, "set").await;
    let started = Instant::now();
    let err = c
        .lock("nottl")
        .wait(Duration::from_millis(800))
        .acquire()
        .await
        .unwrap_err();
    let waited = started.elapsed();
    let calls = command_calls(&mut conn, "set").await - before;
    assert!(err.is_busy(), "{err}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert!(
        calls <= 10,
        "{calls} acquire attempts while waiting 800 ms: the waiter polled"
    );
}

#[tokio::test]
async fn a_non_numeric_fence_is_not_overwritten() {
    // Defect 9: the acquire script overwrote a corrupt fence before failing on it.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let fence = format!("{}:fence", lock_key("fence"));
    let _: () = conn.set(&fence, "abc").await.unwrap();
    let acquired = c.lock("fence").fenced(true).acquire().await;
    assert!(
        acquired.is_err(),
        "acquired over a corrupt fence: {acquired:?}"
    );
    let value: String = conn.get(&fence).await.unwrap();
    assert_eq!(value, "abc", "the corrupt fence was overwritten");
    assert!(!exists(&mut conn, &lock_key("fence")).await);
    // The same for a set (its own raise per lock), a permit and a read hold.
    let builders = [
        c.lock_all(["fence", "fence:b"]),
        c.semaphore("fence", 2),
        c.lock("fence").read(),
    ];
    for builder in builders {
        let acquired = builder.fenced(true).acquire().await;
        assert!(acquired.is_err(), "acquired over a corrupt fence");
        let value: String = conn.get(&fence).await.unwrap();
        assert_eq!(value, "abc", "the corrupt fence was overwritten");
        assert!(!exists(&mut conn, &lock_key("fence")).await);
        assert!(!exists(&mut conn, &lock_key("fence:b")).await);
    }
}

#[tokio::test]
async fn busy_without_wait_reports_zero_waited() {
    // Defect 11: `Busy { waited }` counted the round trip although the caller did not wait.
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let held = b.lock("busy").acquire().await.unwrap();
    let err = a.lock("busy").acquire().await.unwrap_err();
    assert!(
        matches!(err, Error::Busy { waited, .. } if waited == Duration::ZERO),
        "{err:?}"
    );
    held.release().await.unwrap();
}

#[tokio::test]
async fn ttl_below_the_minimum_is_invalid_config() {
    // Defect 8: a 50 ms ttl (below the documented 100 ms minimum) was accepted.
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let err = c
        .lock("short")
        .ttl(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(!exists(&mut conn, &lock_key("short")).await);
    c.lock("short")
        .ttl(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// New API with the fixes (these do not compile against the code before them).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_refused_renewal_is_reported_as_refused_not_unreachable() {
    // Defect 9: Redis answering renewals with an error was reported as `Unreachable`.
    let server = RedisServer::start();
    let mut admin = server.conn().await;
    let url = server
        .acl_user("locker", "locker-pass", &["~*", "&*", "+@all"])
        .await;
    let c = Config::new(url).connect().await.expect("connect as locker");
    let guard = c
        .lock("acl")
        .ttl(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    // Redis stays reachable but answers every script call of this user with NOPERM.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "-evalsha", "-eval"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: String = redis::cmd("PING").query_async(&mut admin).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("loss reported within 5 s");
    assert_ne!(reason, LossReason::Unreachable);
    assert_eq!(reason, LossReason::Refused);
}

#[tokio::test]
async fn an_evicting_server_is_refused_only_when_noeviction_is_required() {
    // Defect 7: a server that may evict lock keys was used without a word.
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let policy = |p: &'static str| {
        redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory-policy", p])
            .clone()
    };
    let _: () = policy("volatile-lru").query_async(&mut conn).await.unwrap();
    Config::new(server.url())
        .connect()
        .await
        .expect("only a warning without require_noeviction");
    let err = Config::new(server.url())
        .require_noeviction(true)
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::EvictionPolicy { policy, .. } if policy == "volatile-lru"),
        "{err}"
    );
    let _: () = policy("noeviction").query_async(&mut conn).await.unwrap();
    Config::new(server.url()).connect().await.unwrap();
    Config::new(server.url())
        .require_noeviction(true)
        .connect()
        .await
        .unwrap();
}

#[tokio::test]
async fn min_ttl_is_100ms() {
    // Defect 8: the minimum ttl is `distlock::MIN_TTL` (100 ms); shorter ttls are refused.
    assert_eq!(distlock::MIN_TTL, Duration::from_millis(100));
    let server = RedisServer::start();
    let c = client(&server).await;
    let err = c
        .lock("min")
        .ttl(distlock::MIN_TTL - Duration::from_millis(1))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    c.lock("min")
        .ttl(distlock::MIN_TTL)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
