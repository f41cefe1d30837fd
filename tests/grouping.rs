//! Group commit (`distlock-core/src/client/batch.rs`) against a real redis-server: plain acquires and
//! releases that arrive while one is in flight go out together (one `ECHO`, one release script
//! call per group), and grouping changes nothing a caller can observe: exclusivity, replies,
//! cancellation, a flushed script cache, a runtime that shuts down mid-group.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Config};
use testkit::{command_calls, lock_keys, RedisServer};

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url())
        .response_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect")
}

/// `tasks` tasks of one client each take and release `cycles` locks of their own.
async fn cycles(c: &Client, tasks: usize, cycles: usize) {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..cycles {
                let guard = c
                    .lock(format!("g:{t}:{i}"))
                    .acquire()
                    .await
                    .expect("acquire");
                guard.release().await.expect("release");
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_and_releases_share_round_trips() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let (echo_before, evalsha_before) = (
        command_calls(&mut conn, "echo").await,
        command_calls(&mut conn, "evalsha").await,
    );
    let (tasks, n) = (64, 20);
    cycles(&c, tasks, n).await;
    let ops = (tasks * n) as u64;
    let echoes = command_calls(&mut conn, "echo").await - echo_before;
    let scripts = command_calls(&mut conn, "evalsha").await - evalsha_before;
    // Alone, every acquire sends its own ECHO and every release its own script call; grouped,
    // a group of acquires shares one ECHO and a group of releases one script call.
    assert!(echoes < ops / 2, "{echoes} ECHOs for {ops} acquires");
    assert!(
        scripts < ops / 2,
        "{scripts} script calls for {ops} releases"
    );
    assert!(
        lock_keys(&mut conn).await.is_empty(),
        "a lock was left held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_locks_stay_exclusive() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let inside: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
    let mut handles = Vec::new();
    for t in 0..32 {
        let (c, inside) = (c.clone(), inside.clone());
        handles.push(tokio::spawn(async move {
            for i in 0..10 {
                let k = (t + i) % 4;
                let guard = c
                    .lock(format!("x:{k}"))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire");
                assert_eq!(
                    inside[k].fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders of x:{k}"
                );
                tokio::task::yield_now().await;
                inside[k].fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let mut conn = server.conn().await;
    assert!(
        lock_keys(&mut conn).await.is_empty(),
        "a lock was left held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_in_a_group_is_reported_busy_and_the_others_taken() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let held = c.lock("held").acquire().await.unwrap();
    let mut handles = Vec::new();
    for t in 0..32 {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            let name = if t % 2 == 0 {
                "held".to_owned()
            } else {
                format!("free:{t}")
            };
            (t, c.lock(name).acquire().await.map(|g| g.release()))
        }));
    }
    for h in handles {
        let (t, result) = h.await.unwrap();
        match result {
            Ok(release) => {
                assert!(t % 2 == 1, "task {t} took the held lock");
                release.await.unwrap();
            }
            Err(distlock::Error::Busy { key, .. }) => {
                assert!(t % 2 == 0, "task {t} found free:{t} busy");
                assert_eq!(key, "held");
            }
            Err(e) => panic!("task {t}: {e}"),
        }
    }
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_run_after_the_script_cache_is_flushed() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    for round in 0..3 {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .exec_async(&mut conn)
            .await
            .unwrap();
        cycles(&c, 32, 5).await;
        assert!(
            lock_keys(&mut conn).await.is_empty(),
            "round {round}: a lock was left held"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_give_up_while_queued_are_left_out_and_leave_nothing_held() {
    let server = RedisServer::start();
    let c = Config::new(server.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    // Redis stops answering: the first acquire is in flight, the rest queue behind it and time
    // out there.
    server.pause();
    let mut handles = Vec::new();
    for t in 0..16 {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            c.lock(format!("q:{t}")).acquire().await
        }));
    }
    for h in handles {
        let result = h.await.unwrap();
        assert!(
            matches!(result, Err(distlock::Error::Timeout { .. })),
            "{result:?}"
        );
    }
    server.resume();
    // Whatever ran once Redis woke up is released by the cleanup; nothing stays held, and the
    // client works again.
    let mut conn = server.conn().await;
    testkit::eventually(Duration::from_secs(5), "cleanup", || {
        let mut conn = conn.clone();
        let c = c.clone();
        async move { (c.background_tasks() == 0 && lock_keys(&mut conn).await.is_empty()).then_some(()) }
    })
    .await;
    cycles(&c, 8, 3).await;
    assert!(lock_keys(&mut conn).await.is_empty());
}

/// Redis freezes for several response timeouts while acquires and releases are under way: the
/// cleanups of timed-out acquires queue behind the requests in flight and their callers give
/// up before they are sent; they must still reach Redis (the reliability suite's row 4 found
/// such a cleanup dropped from its group, leaving the lock to its ttl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_whose_callers_stopped_waiting_still_reach_redis() {
    let server = RedisServer::start();
    let c = Config::new(server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let conn = server.conn().await;
    for round in 0..6 {
        let mut guards = Vec::new();
        for i in 0..4 {
            guards.push(c.lock(format!("r:{round}:{i}")).acquire().await.unwrap());
        }
        server.pause();
        let mut handles = Vec::new();
        for guard in guards {
            handles.push(tokio::spawn(async move { guard.release().await.err() }));
        }
        for i in 0..6 {
            let lock = c
                .lock(format!("n:{round}:{i}"))
                .ttl(Duration::from_secs(30));
            handles.push(tokio::spawn(async move { lock.acquire().await.err() }));
        }
        for h in handles {
            let error = h.await.unwrap();
            assert!(
                matches!(error, Some(distlock::Error::Timeout { .. })),
                "{error:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.resume();
        // Nothing is left to its ttl: neither a timed-out acquire's cleanup nor an explicit
        // release that timed out (tried again in the background, with backoff, past the
        // freeze).
        testkit::eventually(Duration::from_secs(5), "releases after the freeze", || {
            let mut conn = conn.clone();
            async move { lock_keys(&mut conn).await.is_empty().then_some(()) }
        })
        .await;
    }
}

#[test]
fn a_runtime_shutting_down_mid_group_does_not_stall_the_client() {
    let server = RedisServer::start();
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let c = main.block_on(client(&server));
    for round in 0..5 {
        // A short-lived runtime starts many acquires and shuts down while they are in flight.
        let doomed = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        for t in 0..32 {
            let c = c.clone();
            doomed.spawn(async move {
                if let Ok(g) = c.lock(format!("d:{round}:{t}")).acquire().await {
                    let _ = g.release().await;
                }
            });
        }
        std::thread::sleep(Duration::from_millis(2));
        doomed.shutdown_timeout(Duration::ZERO);
        // The client keeps working from another runtime, and nothing stays held for long.
        main.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), cycles(&c, 16, 3))
                .await
                .expect("the client stalled after a runtime shut down mid-group");
        });
    }
    main.block_on(async {
        let conn = server.conn().await;
        testkit::eventually(Duration::from_secs(5), "cleanup", || {
            let mut conn = conn.clone();
            let c = c.clone();
            async move {
                (c.background_tasks() == 0 && lock_keys(&mut conn).await.is_empty()).then_some(())
            }
        })
        .await;
    });
}
