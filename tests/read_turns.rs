//! Readers and writers in their turn (issue 28, item 3), against real servers: on one server
//! and through a cluster's shard (Sentinel runs the same scripts) a read hold's waiters and the lock's
//! (the writers) queue in one queue, in arrival order; a writer's release hands the lock to the
//! first waiter, and if that is a reader, to every reader at the head of the queue together; the
//! last reader's release hands the lock to a writer queued behind it; a reader never enters
//! past a writer queued before it. Mixed readers and writers stay exclusive (no writer with
//! anyone inside) and fair among readers and among writers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{hash_slot, Client, Config, Error, LockGuard};
use testkit::{
    eventually, fairness_run, queued, quick_client as client, until_queued, FairnessRun, Hold,
    RedisCluster, RedisServer,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

async fn clients(server: &RedisServer, n: usize) -> Vec<Client> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(client(server).await);
    }
    all
}

/// Takes `name` to write (`read`: a read hold), with a 30 s lease, waiting up to 20 s.
async fn take(c: &Client, name: &str, read: bool) -> Result<LockGuard, Error> {
    let builder = match read {
        true => c.lock(name).read(),
        false => c.lock(name),
    };
    let builder = builder.ttl(Duration::from_secs(30));
    builder.wait(Duration::from_secs(20)).acquire().await
}

/// A writer of `clients[0]` holds `name` (30 s); three readers of the other clients queue
/// behind it: its release hands all three their shares together, at once.
async fn readers_handed_their_shares_together(
    all: &[Client],
    conn: &redis::aio::MultiplexedConnection,
    name: &'static str,
) {
    let writer = take(&all[0], name, false).await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let mut readers: Vec<JoinHandle<Instant>> = Vec::new();
    for (i, c) in all[1..4].iter().enumerate() {
        let (c, inside) = (c.clone(), inside.clone());
        readers.push(tokio::spawn(async move {
            let g = take(&c, name, true).await.unwrap();
            let at = Instant::now();
            inside.fetch_add(1, Ordering::SeqCst);
            // All three inside together: each waits (bounded) until the others are in.
            eventually(Duration::from_secs(2), "all readers inside", || async {
                (inside.load(Ordering::SeqCst) == 3).then_some(())
            })
            .await;
            g.release().await.unwrap();
            at
        }));
        until_queued(conn, name, i + 1).await;
    }
    let released = Instant::now();
    writer.release().await.unwrap();
    for r in readers {
        let took = r.await.unwrap() - released;
        assert!(took < Duration::from_secs(1), "handed at once: {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_queued_behind_a_writer_are_handed_their_shares_together() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    readers_handed_their_shares_together(&clients(&server, 4).await, &conn, "rw-batch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_hands_queued_readers_their_shares_through_the_shard() {
    let cluster = RedisCluster::start(3, 0);
    let name = "rw-shard";
    let node = cluster.master_of_slot(hash_slot(format!("distlock:{{{name}}}").as_bytes()));
    let conn = cluster.node(node).conn().await;
    let mut all = Vec::new();
    for _ in 0..4 {
        all.push(Config::cluster(cluster.urls()).connect().await.unwrap());
    }
    readers_handed_their_shares_together(&all, &conn, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_queued_behind_readers_is_handed_the_lock_and_no_reader_passes_it() {
    let server = RedisServer::start();
    let all = clients(&server, 4).await;
    let conn = server.conn().await;
    let r1 = take(&all[0], "rw-writer", true).await.unwrap();
    let r2 = take(&all[1], "rw-writer", true).await.unwrap();
    let w = all[2].clone();
    let writer = tokio::spawn(async move {
        let g = take(&w, "rw-writer", false).await.unwrap();
        let at = Instant::now();
        g.release().await.unwrap();
        at
    });
    until_queued(&conn, "rw-writer", 1).await;
    // A new reader does not enter past the writer queued before it.
    let late = all[3]
        .lock("rw-writer")
        .read()
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(
        matches!(late, Err(Error::Busy { .. })),
        "a reader passed a queued writer: {late:?}"
    );
    r1.release().await.unwrap();
    let released = Instant::now();
    r2.release().await.unwrap();
    let took = writer.await.unwrap() - released;
    assert!(
        took < Duration::from_secs(1),
        "the last reader's release hands the writer the lock: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_take_their_turns_in_arrival_order() {
    let server = RedisServer::start();
    let all = clients(&server, 4).await;
    let conn = server.conn().await;
    let holder = take(&all[0], "rw-order", false).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters: Vec<JoinHandle<Instant>> = Vec::new();
    for (i, read) in [(1, true), (2, false), (3, true)] {
        let (c, order) = (all[i].clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = take(&c, "rw-order", read).await.unwrap();
            let at = Instant::now();
            order.lock().unwrap().push(i);
            // Long enough that a reader behind the writer would be seen entering early.
            tokio::time::sleep(Duration::from_millis(50)).await;
            g.release().await.unwrap();
            at
        }));
        until_queued(&conn, "rw-order", i).await;
    }
    let released = Instant::now();
    holder.release().await.unwrap();
    let mut last = released;
    for w in waiters {
        last = last.max(w.await.unwrap());
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 3], "reader, writer, reader");
    let took = last - released;
    assert!(
        took < Duration::from_secs(1),
        "three handoffs took {took:?}"
    );
    assert_eq!(queued(&conn, "rw-order").await, 0, "nobody left queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_readers_and_writers_stay_exclusive_and_fair() {
    let server = RedisServer::start();
    let run = FairnessRun {
        duration: Duration::from_secs(4),
        hold_ms: (2, 10),
        hold: Hold::ReadWrite,
        ..FairnessRun::default()
    };
    fairness_run(&clients(&server, 4).await, "rw-fair", run)
        .await
        .assert_in_turn(0.95);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_reader_hands_on_a_share_handed_to_it() {
    let server = RedisServer::start();
    let all = clients(&server, 3).await;
    let conn = server.conn().await;
    let holder = take(&all[0], "rw-cx", false).await.unwrap();
    let reader = tokio::spawn({
        let c = all[1].clone();
        async move { take(&c, "rw-cx", true).await }
    });
    until_queued(&conn, "rw-cx", 1).await;
    let w = all[2].clone();
    let writer = tokio::spawn(async move {
        let g = take(&w, "rw-cx", false).await.unwrap();
        let at = Instant::now();
        g.release().await.unwrap();
        at
    });
    until_queued(&conn, "rw-cx", 2).await;
    reader.abort();
    let _ = reader.await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let took = writer.await.unwrap() - released;
    assert!(
        took < Duration::from_millis(500),
        "handed on at once: {took:?}"
    );
    all[1].settle().await;
    until_queued(&conn, "rw-cx", 0).await;
}
