//! Waiters mark the lock they wait for (`d2:<owner>+`, as a futex's "locked, with waiters"),
//! against a real redis-server: a release that finds its lock unmarked nobody waits for, and
//! costs Redis a `GET` and a `DEL` (no queue read, no message); a lock someone waits for is
//! marked, stays its owner's (renewed, released, handed over in turn) and is handed on at its
//! release as before.

use std::time::Duration;

use distlock::Client;
use futures_util::StreamExt;
use testkit::{command_calls, lock_keys, quick_client as client, until_queued, RedisServer};

/// The messages published on the release channel of `name` (default prefix), as they come.
async fn release_messages(server: &RedisServer, name: &str) -> redis::aio::PubSub {
    let mut pubsub = server.client().get_async_pubsub().await.unwrap();
    pubsub
        .subscribe(format!("distlock:{{{name}}}:released"))
        .await
        .unwrap();
    pubsub
}

/// Calls of the commands a release with waiters sends (queue read, message).
async fn waiter_commands(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let mut n = 0;
    for command in ["zrange", "publish", "spublish"] {
        n += command_calls(conn, command).await;
    }
    n
}

/// The raw value of the lock key of `name` (default prefix), if any.
async fn lock_value(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Option<String> {
    let keys = lock_keys(conn).await;
    let key = keys.iter().find(|k| k.ends_with(&format!("{{{name}}}")))?;
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

/// `tasks` tasks of `c`, each taking and releasing `cycles` locks of its own.
async fn uncontended(c: &Client, tasks: usize, cycles: usize) {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let c = c.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..cycles {
                let guard = c.lock(format!("m:{t}:{i}")).acquire().await.unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_release_reads_no_queue_and_sends_no_message() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let before = waiter_commands(&mut conn).await;
    // Alone (one release per script call) and grouped (many per `RELEASE_MANY`), with `run`.
    uncontended(&c, 1, 50).await;
    uncontended(&c, 64, 10).await;
    for i in 0..50 {
        c.lock(format!("r:{i}")).run(async {}).await.unwrap();
    }
    let after = waiter_commands(&mut conn).await;
    assert_eq!(
        after - before,
        0,
        "releases nobody waited for read a queue or sent a message"
    );
    assert!(
        lock_keys(&mut conn).await.is_empty(),
        "a lock was left held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waited_for_lock_is_marked_stays_its_owners_and_is_handed_over() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    // A 1 s lease renewed by the watchdog while the waiter waits: the renewals find the lock
    // marked and still the holder's.
    let held = a
        .lock("marked")
        .ttl(Duration::from_secs(1))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    let unmarked = lock_value(&mut conn, "marked").await.unwrap();
    assert!(
        !unmarked.ends_with('+'),
        "a lock nobody waits for is marked"
    );
    let waiter = tokio::spawn(async move {
        let g = b
            .lock("marked")
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        g.release().await.unwrap();
    });
    until_queued(&conn, "marked", 1).await;
    let mut messages = release_messages(&server, "marked").await;
    let value = lock_value(&mut conn, "marked").await.unwrap();
    assert_eq!(value, format!("{unmarked}+"), "the waiter left no mark");
    // Three lease lengths: the lease is renewed through the mark.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(
        held.ensure_held().is_ok(),
        "the holder's renewal failed on its marked lock: {:?}",
        held.lost_reason()
    );
    held.release().await.unwrap();
    // Handed over by the release itself: its message names the waiter (a silent release would
    // leave the waiter to find the lock free at its look again, within a second, and publish
    // nothing).
    let message = tokio::time::timeout(Duration::from_secs(5), messages.on_message().next())
        .await
        .expect("the release published nothing")
        .unwrap();
    let payload: String = message.get_payload().unwrap();
    assert!(
        payload.starts_with("d2:") && payload.contains(' '),
        "the release's message is not a grant naming the waiter: {payload:?}"
    );
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .unwrap();
    assert!(
        lock_keys(&mut conn).await.is_empty(),
        "a lock was left held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_carried_behind_another_owners_lock_marks_it() {
    // A release whose lock another owner holds now (its own lease ran out) still queues the
    // next waiter it carries: that lock must be marked, or its holder's release would delete
    // it unread and publish nothing, leaving the carried waiter to its look again.
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let (lock, chan) = ("distlock:{carried}", "distlock:{carried}:released");
    let (queue, ids) = ("distlock:{carried}:queue", "distlock:{carried}:queue:ids");
    let _: () = redis::cmd("SET")
        .arg(lock)
        .arg("d2:other:1")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let release = |value: &str, next: Option<&str>| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(distlock::scripts::RELEASE)
            .arg(4)
            .arg(lock)
            .arg(chan)
            .arg(queue)
            .arg(ids)
            .arg(value)
            .arg("r1")
            .arg(0)
            .arg("-");
        if let Some(next) = next {
            cmd.arg(next).arg(1024 * 1000 + 1000).arg("r2").arg(3000);
        }
        cmd
    };
    let (_, code): (String, i64) = release("d2:me:1", Some("d2:me:2"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, -1, "another owner holds it");
    let value = lock_value(&mut conn, "carried").await.unwrap();
    assert_eq!(
        value, "d2:other:1+",
        "the carried waiter queued behind it without a mark"
    );
    let mut messages = release_messages(&server, "carried").await;
    let (_, code): (String, i64) = release("d2:other:1", None)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(code, 0);
    let message = tokio::time::timeout(Duration::from_secs(5), messages.on_message().next())
        .await
        .expect("the holder's release published nothing")
        .unwrap();
    let payload: String = message.get_payload().unwrap();
    assert_eq!(
        payload, "d2:me:2 r2",
        "the release did not hand the lock to the carried waiter"
    );
    assert_eq!(lock_value(&mut conn, "carried").await.unwrap(), "d2:me:2+");
}
