//! Sets of locks in their turn (issue 28, item 3), against real servers: where a set is one
//! call (one server, Sentinel, a cluster whose set lies in one hash slot) a waiting set queues
//! at the lock it finds held and that lock's release hands it over; its next attempt takes the
//! whole set, or gives the lock back and queues at the lock now held. Waiters of several
//! clients take a set in turn; they are handed it in arrival order (fenced: tokens rising);
//! sets mixed with users of their single locks never overlap on any lock and never deadlock; a
//! cancelled set waiter hands a lock handed to it on; through a cluster's shard.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{hash_slot, Client, Config, LockGuard};
use testkit::{
    fairness_run, queued, quick_client as client, until_queued, FairnessRun, Hold, RedisCluster,
    RedisServer,
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

/// Waits up to 20 s for the set `names`, fenced, with a 30 s lease.
async fn set(c: &Client, names: [&str; 2]) -> LockGuard {
    c.lock_all(names)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(20))
        .fenced(true)
        .acquire()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_clients_take_a_set_in_turn() {
    let server = RedisServer::start();
    let run = FairnessRun {
        duration: Duration::from_secs(4),
        hold_ms: (2, 10),
        hold: Hold::Set,
        ..FairnessRun::default()
    };
    let figures = fairness_run(&clients(&server, 4).await, "set-fair", run).await;
    figures.assert_in_turn(0.99);
    assert!(figures.longest_streak <= 2, "{}", figures.summary());
}

/// A holder of the set `names` with a 30 s lease and three set waiters of three clients queued
/// behind it: each release hands the set to the next in arrival order at once (nothing else
/// could free it this soon), every lock's tokens rising.
async fn handed_in_arrival_order(
    clients: Vec<Client>,
    conn: &redis::aio::MultiplexedConnection,
    names: [&'static str; 2],
) {
    let mut clients = clients.into_iter();
    let holder = set(&clients.next().unwrap(), names).await;
    let tokens = move |g: &LockGuard| names.map(|n| g.token_of(n).expect("a fenced set's token"));
    let order = Arc::new(Mutex::new(vec![(usize::MAX, tokens(&holder))]));
    let mut waiters: Vec<JoinHandle<Instant>> = Vec::new();
    for i in 0..3 {
        let (c, order) = (clients.next().unwrap(), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = set(&c, names).await;
            let at = Instant::now();
            order.lock().unwrap().push((i, tokens(&g)));
            g.release().await.unwrap();
            at
        }));
        // Queued at the first lock of the set, held by the holder.
        until_queued(conn, names[0], i + 1).await;
    }
    let released = Instant::now();
    holder.release().await.unwrap();
    let mut last = released;
    for w in waiters {
        last = last.max(w.await.unwrap());
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<usize> = order[1..].iter().map(|(i, _)| *i).collect();
    assert_eq!(who, [0, 1, 2], "handed in arrival order");
    for lock in 0..2 {
        let tokens: Vec<u64> = order.iter().map(|(_, t)| t[lock]).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "lock {lock}'s tokens rise: {tokens:?}"
        );
    }
    let took = last - released;
    assert!(
        took < Duration::from_secs(1),
        "three handoffs took {took:?}"
    );
    assert_eq!(queued(conn, names[0]).await, 0, "nobody left queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_waiters_are_handed_the_set_in_arrival_order() {
    let server = RedisServer::start();
    let conn = server.conn().await;
    let names = ["fifo:a", "fifo:b"];
    handed_in_arrival_order(clients(&server, 4).await, &conn, names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_hands_a_set_in_one_slot_over_in_arrival_order() {
    let cluster = RedisCluster::start(3, 0);
    // Two names whose keys share a hash slot (names cannot carry hash tags): found by search.
    let slot_of = |name: &str| hash_slot(format!("distlock:{{{name}}}").as_bytes());
    let slot = slot_of("slot-set:0");
    let other = (1..)
        .map(|i| format!("slot-set:{i}"))
        .find(|name| slot_of(name) == slot)
        .unwrap();
    let names: [&'static str; 2] = ["slot-set:0", Box::leak(other.into_boxed_str())];
    let conn = cluster.node(cluster.master_of_slot(slot)).conn().await;
    let mut all = Vec::new();
    for _ in 0..4 {
        all.push(Config::cluster(cluster.urls()).connect().await.unwrap());
    }
    handed_in_arrival_order(all, &conn, names).await;
}

/// Holders of each lock, counted: a set counts in both.
#[derive(Default)]
struct Inside {
    at: [AtomicUsize; 2],
    overlaps: AtomicU64,
}

impl Inside {
    fn enter(&self, locks: &[usize]) {
        for &l in locks {
            if self.at[l].fetch_add(1, Ordering::SeqCst) > 0 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn leave(&self, locks: &[usize]) {
        for &l in locks {
            self.at[l].fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Two clients take the set `[a, b]`, one takes `a` alone, one `b` alone, for 4 s, waiting up to
/// 10 s each: no lock ever has two holders, every acquire gets its hold (no deadlock, no wait
/// running out), and every client gets some turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_mixed_with_their_single_locks_never_overlap_or_deadlock() {
    let server = RedisServer::start();
    let all = clients(&server, 4).await;
    let inside = Arc::new(Inside::default());
    let until = Instant::now() + Duration::from_secs(4);
    let plans: [&'static [usize]; 4] = [&[0, 1], &[0, 1], &[0], &[1]];
    let mut tasks = Vec::new();
    for (c, locks) in all.into_iter().zip(plans) {
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let names = ["mix:a", "mix:b"];
            let mut ok = 0u64;
            while Instant::now() < until {
                let builder = match locks {
                    [one] => c.lock(names[*one]),
                    _ => c.lock_all(names),
                };
                let builder = builder.ttl(Duration::from_secs(5));
                let g = builder.wait(Duration::from_secs(10)).acquire().await;
                let g = g.unwrap_or_else(|e| panic!("{locks:?}: {e}"));
                inside.enter(locks);
                tokio::time::sleep(Duration::from_millis(2 + ok % 5)).await;
                inside.leave(locks);
                g.release().await.unwrap();
                ok += 1;
            }
            ok
        }));
    }
    let mut oks = Vec::new();
    for t in tasks {
        oks.push(t.await.unwrap());
    }
    assert_eq!(inside.overlaps.load(Ordering::SeqCst), 0, "ok {oks:?}");
    assert!(
        oks.iter().all(|&n| n >= 5),
        "every client got turns: {oks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_set_waiter_hands_on_a_lock_handed_to_it() {
    let server = RedisServer::start();
    let all = clients(&server, 3).await;
    let conn = server.conn().await;
    let names = ["cx:a", "cx:b"];
    let holder = set(&all[0], names).await;
    let first = tokio::spawn({
        let b = all[1].clone();
        async move { set(&b, names).await }
    });
    until_queued(&conn, names[0], 1).await;
    let second = tokio::spawn({
        let c = all[2].clone();
        async move {
            let g = set(&c, names).await;
            let at = Instant::now();
            g.release().await.unwrap();
            at
        }
    });
    until_queued(&conn, names[0], 2).await;
    // The first waiter goes away; the release that follows finds the second first in line (or
    // hands the lock to the first, whose departure hands it on).
    first.abort();
    let _ = first.await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let took = second.await.unwrap() - released;
    assert!(
        took < Duration::from_millis(500),
        "handed on at once: {took:?}"
    );
    all[1].settle().await;
    until_queued(&conn, names[0], 0).await;
}
