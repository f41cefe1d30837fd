//! `LockBuilder::run`'s body and its frame (re-entry, `fencing_token()`): the frame is there
//! while the body is polled and while it is dropped (completed, stopped by a loss, or cancelled
//! with `run`'s future), is gone between polls and after a panic, and nests; a locked future
//! runs on spawned tasks of a multi-threaded runtime.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Client, Config, Error, LossReason};
use testkit::RedisServer;

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// Records the fencing token visible when it is dropped.
struct DropProbe(Arc<Mutex<Vec<Option<u64>>>>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(distlock::fencing_token());
    }
}

#[tokio::test]
async fn a_body_stopped_by_a_loss_is_dropped_inside_its_frame() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let token = Arc::new(Mutex::new(None));
    let (probe, inside) = (DropProbe(seen.clone()), token.clone());
    let err = c
        .lock("stopped")
        .ttl(Duration::from_millis(200))
        .fenced(true)
        .run(async move {
            let _probe = probe;
            *inside.lock().unwrap() = distlock::fencing_token();
            tokio::time::sleep(Duration::from_secs(5)).await;
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                reason: LossReason::LeaseElapsed,
                ..
            }
        ),
        "{err}"
    );
    let token = token.lock().unwrap().expect("a fenced body sees its token");
    assert_eq!(*seen.lock().unwrap(), vec![Some(token)]);
    assert_eq!(distlock::fencing_token(), None, "the frame is left");
}

#[tokio::test]
async fn a_body_cancelled_with_run_is_dropped_inside_its_frame() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let token = Arc::new(Mutex::new(None));
    let started = Arc::new(tokio::sync::Notify::new());
    let (probe, inside, go) = (DropProbe(seen.clone()), token.clone(), started.clone());
    let run = c
        .lock("cancelled")
        .ttl(Duration::from_secs(10))
        .fenced(true)
        .run(async move {
            let _probe = probe;
            *inside.lock().unwrap() = distlock::fencing_token();
            go.notify_one();
            std::future::pending::<()>().await;
        });
    tokio::select! {
        _ = run => panic!("the body never completes"),
        () = started.notified() => {}
    }
    // `run`'s future was dropped at the end of the select.
    let token = token.lock().unwrap().expect("a fenced body sees its token");
    assert_eq!(*seen.lock().unwrap(), vec![Some(token)]);
    assert_eq!(distlock::fencing_token(), None, "the frame is left");
    // The cancelled run released the lock in the background.
    let again = c
        .lock("cancelled")
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .expect("released after the cancelled run");
    assert!(!again.is_reentry());
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_acquire_drops_the_body_unpolled_and_outside_any_frame() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let holder = c.lock("busy").acquire().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let probe = DropProbe(seen.clone());
    let polled = Arc::new(AtomicUsize::new(0));
    let count = polled.clone();
    let waited = tokio::time::timeout(
        Duration::from_millis(200),
        c.lock("busy")
            .wait(Duration::from_secs(10))
            .run(async move {
                let _probe = probe;
                count.fetch_add(1, Ordering::SeqCst);
            }),
    )
    .await;
    assert!(waited.is_err(), "still waiting for the holder");
    assert_eq!(polled.load(Ordering::SeqCst), 0);
    assert_eq!(*seen.lock().unwrap(), vec![None]);
    holder.release().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn frames_nest_and_are_only_there_while_the_body_is_polled() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let outer = c.lock("outer").fenced(true).run(async {
        let outer = distlock::fencing_token().expect("fenced");
        let inner = c
            .lock("inner")
            .fenced(true)
            .run(async {
                tokio::task::yield_now().await;
                distlock::fencing_token().expect("fenced")
            })
            .await
            .unwrap();
        assert!(inner > outer, "a later token is larger");
        assert_eq!(
            distlock::fencing_token(),
            Some(outer),
            "back in the outer frame"
        );
        tokio::task::yield_now().await;
        assert_eq!(distlock::fencing_token(), Some(outer));
        // Re-entry through the frame: the outer hold is joined, not waited for.
        let again = c.lock("outer").acquire().await.unwrap();
        assert!(again.is_reentry());
        again.release().await.unwrap();
        outer
    });
    // Polled on the same thread between the body's polls: no frame.
    let beside = async {
        for _ in 0..5 {
            assert_eq!(distlock::fencing_token(), None);
            tokio::task::yield_now().await;
        }
    };
    let (outer, ()) = tokio::join!(outer, beside);
    outer.unwrap();
    assert_eq!(distlock::fencing_token(), None);
}

#[test]
fn a_panicking_body_leaves_no_frame_behind() {
    let server = RedisServer::start();
    // One thread: the task that panics and the code after it share the thread-local frame.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = client(&server).await;
        let locked = c.clone();
        let panicked = tokio::spawn(async move {
            locked
                .lock("panics")
                .fenced(true)
                .run(async {
                    tokio::task::yield_now().await;
                    panic!("the body panics");
                })
                .await
        })
        .await
        .unwrap_err();
        assert!(panicked.is_panic());
        assert_eq!(distlock::fencing_token(), None);
        // A fresh acquisition, not a re-entry into the panicked body's hold.
        let guard = c
            .lock("panics")
            .wait(Duration::from_secs(2))
            .acquire()
            .await
            .unwrap();
        assert!(!guard.is_reentry());
        guard.release().await.unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_spawned_tasks_are_mutually_exclusive() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (c, inside, most) = (c.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                c.lock("spawned")
                    .wait(Duration::from_secs(10))
                    .run(async move {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two bodies at once");
}
