//! The handoff in the release (issue 21, item 2), against a real redis-server: a plain lock's
//! waiters queue in Redis, and a release hands the lock to the first of them in place and
//! names it in its message, so the next holder starts after one message, with no acquire round
//! trip; FIFO across clients; a waiter that went away costs the lock its grant window at most,
//! never its ttl; a handed-over lock is extended to its ttl before its window runs out. A
//! client's waiters behind one of them already queued wait in the client and are queued by that
//! client's releases (one script per handoff), promoted to queue themselves when the queued one
//! goes away, and leave nothing behind when they go away; several tasks of several clients stay
//! fair and exclusive.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{hash_slot, Client, Config, Error, LockGuard};
use testkit::proxy::ReplyFault;
use testkit::{
    command_calls, eventually, fairness_run, queued, quick_client as client, until_queued,
    Fairness, FairnessRun, Hold, RedisCluster, RedisServer,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Takes `name` (free) for `secs`.
async fn hold(c: &Client, name: &str, secs: u64) -> LockGuard {
    c.lock(name)
        .ttl(Duration::from_secs(secs))
        .acquire()
        .await
        .unwrap()
}

/// Takes `name` for `secs`, waiting up to 20 s.
async fn wait_for(c: &Client, name: &str, secs: u64) -> Result<LockGuard, Error> {
    c.lock(name)
        .ttl(Duration::from_secs(secs))
        .wait(Duration::from_secs(20))
        .acquire()
        .await
}

/// A task that waits for `name` (ttl `secs`), then notes when it took it (and runs `inside`)
/// and releases it: resolves to when it took it.
fn waiter(
    c: Client,
    name: &'static str,
    secs: u64,
    inside: impl FnOnce() + Send + 'static,
) -> JoinHandle<Instant> {
    tokio::spawn(async move {
        let g = wait_for(&c, name, secs).await.unwrap();
        let at = Instant::now();
        inside();
        g.release().await.unwrap();
        at
    })
}

/// The lock key's remaining ttl in ms (-2: no key).
async fn pttl(conn: &redis::aio::MultiplexedConnection, name: &str) -> i64 {
    let mut conn = conn.clone();
    redis::cmd("PTTL")
        .arg(format!("distlock:{{{name}}}"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_waiter_without_an_acquire_round_trip() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let conn = server.conn().await;
    let holder = hold(&a, "h", 10).await;
    let (got, got_rx) = tokio::sync::oneshot::channel();
    let waiting = tokio::spawn(async move {
        let g = wait_for(&b, "h", 10).await.unwrap();
        got.send(()).unwrap();
        g
    });
    until_queued(&conn, "h", 1).await;
    let mut stats = conn.clone();
    let (evalsha, set) = (
        command_calls(&mut stats, "evalsha").await,
        command_calls(&mut stats, "set").await,
    );
    holder.release().await.unwrap();
    got_rx.await.unwrap();
    // One script call (the release, which set the lock to the waiter's value inside it) and
    // no acquire of the waiter's own.
    assert_eq!(command_calls(&mut stats, "evalsha").await - evalsha, 1);
    assert_eq!(
        command_calls(&mut stats, "set").await - set,
        1,
        "the release's SET"
    );
    assert_eq!(
        queued(&conn, "h").await,
        0,
        "the entry left the queue with the grant"
    );
    let g = waiting.await.unwrap();
    // The lock is the waiter's, and its lease is the full ttl once extended (the grant's
    // window is 1 s): still held 1.5 s later, and not lost.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        g.lost_reason(),
        None,
        "the handed-over lease was extended to its ttl"
    );
    assert!(g.guaranteed_until() > Instant::now() + Duration::from_secs(5));
    let left = pttl(&conn, "h").await;
    assert!(left > 5000, "extended to the 10 s ttl, pttl {left}");
    g.release().await.unwrap();
    assert_eq!(pttl(&conn, "h").await, -2, "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_clients_are_handed_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let holder_client = client(&server).await;
    let conn = server.conn().await;
    let holder = hold(&holder_client, "fifo", 10).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let order = order.clone();
        let push = move || order.lock().unwrap().push(i);
        waiters.push(waiter(client(&server).await, "fifo", 10, push));
        // Each queued before the next comes.
        until_queued(&conn, "fifo", i + 1).await;
    }
    // The holder releases and asks again at once: it queues behind the four.
    holder.release().await.unwrap();
    let again = wait_for(&holder_client, "fifo", 10).await.unwrap();
    order.lock().unwrap().push(99);
    again.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 99]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_went_away_costs_the_lock_its_window_not_its_ttl() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let conn = server.conn().await;
    let holder = hold(&a, "gone", 30).await;
    // A waiter of a process that died: an entry ahead of everyone (ticket 1, 1 s window).
    let mut c = conn.clone();
    let _: () = redis::cmd("ZADD")
        .arg("distlock:{gone}:queue")
        .arg(1024 + 1000)
        .arg("d2:dead-waiter")
        .query_async(&mut c)
        .await
        .unwrap();
    let started = Instant::now();
    let live = waiter(b, "gone", 30, || {});
    until_queued(&conn, "gone", 2).await;
    holder.release().await.unwrap();
    // Handed to the dead waiter for its 1 s window at most.
    let left = pttl(&conn, "gone").await;
    assert!(
        (0..=1000).contains(&left),
        "granted for the window, pttl {left}"
    );
    let took = live.await.unwrap() - started;
    assert!(
        took < Duration::from_secs(4),
        "the live waiter took the lock {took:?} after the release (window 1 s + its recheck 1 s), not the 30 s ttl"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_hands_on_a_lock_handed_to_it() {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let conn = server.conn().await;
    let holder = hold(&a, "cx", 30).await;
    let first = tokio::spawn({
        let b = b.clone();
        async move { wait_for(&b, "cx", 30).await }
    });
    until_queued(&conn, "cx", 1).await;
    let second = waiter(c, "cx", 30, || {});
    until_queued(&conn, "cx", 2).await;
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
    b.settle().await;
    eventually(Duration::from_secs(5), "queue empty", || async {
        (queued(&conn, "cx").await == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_clients_stay_fair_and_exclusive() {
    let server = RedisServer::start();
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..4 {
        clients.push(client(&server).await);
    }
    let figures = fair_and_exclusive(&clients, "fair", (2, 10)).await;
    assert!(figures.longest_streak <= 2, "{}", figures.summary());
}

/// A 4 s contention run of one task per entry of `tasks` (holds of `hold_ms`): no overlap, no
/// acquire without the lock, Jain's index at least 0.99.
async fn fair_and_exclusive(tasks: &[Client], name: &str, hold_ms: (u64, u64)) -> Fairness {
    fair_and_exclusive_holding(tasks, name, hold_ms, Hold::Lock).await
}

/// [`fair_and_exclusive`] taking `hold` (fenced: tokens rising from holder to holder).
async fn fair_and_exclusive_holding(
    tasks: &[Client],
    name: &str,
    hold_ms: (u64, u64),
    hold: Hold,
) -> Fairness {
    let run = FairnessRun {
        duration: Duration::from_secs(4),
        wait: Duration::from_secs(3),
        ttl: Duration::from_secs(5),
        hold_ms,
        hold,
    };
    let figures = fairness_run(tasks, name, run).await;
    figures.assert_in_turn(0.99);
    figures
}

/// Fenced waiters (issue 28): queued and handed the lock in turn like plain ones, each
/// confirming its grant with one more attempt that raises its token while the lock is its own:
/// fair, exclusive, and every holder's token above the previous holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_waiters_take_their_turns_with_rising_tokens() {
    let server = RedisServer::start();
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..4 {
        clients.push(client(&server).await);
    }
    let figures = fair_and_exclusive_holding(&clients, "fenced-fair", (2, 10), Hold::Fenced).await;
    assert!(figures.longest_streak <= 2, "{}", figures.summary());
}

/// Waiters that ask for a replica's acknowledgement (issue 28): handed the lock in turn, each
/// confirming its grant with one more attempt whose `WAIT` covers the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_waiters_take_their_turns() {
    let server = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&server);
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..4 {
        clients.push(client(&server).await);
    }
    let figures =
        fair_and_exclusive_holding(&clients, "replicated-fair", (2, 10), Hold::Replicated(1)).await;
    assert!(figures.longest_streak <= 2, "{}", figures.summary());
}

/// A fenced waiter handed the lock by a release gets a token above the releasing holder's:
/// the grant carries no token, and the waiter's confirming attempt raises it while the lock is
/// its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_waiter_handed_the_lock_gets_a_token_above_the_holders() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let conn = server.conn().await;
    let first = a
        .lock("fenced-hand")
        .ttl(Duration::from_secs(5))
        .fenced(true)
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        b.lock("fenced-hand")
            .ttl(Duration::from_secs(5))
            .fenced(true)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
    });
    until_queued(&conn, "fenced-hand", 1).await;
    let held = first.token().expect("a fenced lock's token");
    first.release().await.unwrap();
    let second = waiting.await.unwrap().expect("handed the lock in its turn");
    assert!(second.token().expect("a token") > held);
    assert!(
        pttl(&conn, "fenced-hand").await > 2_000,
        "extended to its ttl"
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_hands_the_lock_over_through_the_shard_in_arrival_order() {
    let cluster = RedisCluster::start(3, 0);
    let name = "shard-fifo";
    let node = cluster.master_of_slot(hash_slot(format!("distlock:{{{name}}}").as_bytes()));
    let conn = cluster.node(node).conn().await;
    let connect = || Config::cluster(cluster.urls()).connect();
    let holder = hold(&connect().await.unwrap(), name, 30).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let order = order.clone();
        let push = move || order.lock().unwrap().push(i);
        waiters.push(waiter(connect().await.unwrap(), name, 30, push));
        until_queued(&conn, name, i + 1).await;
    }
    let released = Instant::now();
    holder.release().await.unwrap();
    let mut last = released;
    for w in waiters {
        last = last.max(w.await.unwrap());
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
    // Handed over by each release (a 30 s lease: nothing else could free it this soon).
    let took = last - released;
    assert!(
        took < Duration::from_secs(1),
        "three handoffs took {took:?}"
    );
}

/// Waits until `c` has `n` waiters for `name` waiting in the client (its cohort).
async fn until_in_client(c: &Client, name: &str, n: usize) {
    eventually(
        Duration::from_secs(5),
        "waiters in the client",
        || async move { (c.waiting_in_client(name) == n).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_waiters_wait_in_the_client_and_its_own_releases_queue_them() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let conn = server.conn().await;
    let holder = hold(&a, "cohort", 10).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let order = order.clone();
        let push = move || order.lock().unwrap().push(i);
        waiters.push(waiter(b.clone(), "cohort", 10, push));
        // The first queues itself in Redis; the others wait in the client behind it.
        if i == 0 {
            until_queued(&conn, "cohort", 1).await;
        } else {
            until_in_client(&b, "cohort", i).await;
        }
    }
    assert_eq!(
        queued(&conn, "cohort").await,
        1,
        "one of b's waiters in Redis"
    );
    let mut stats = conn.clone();
    let scripts = command_calls(&mut stats, "evalsha").await;
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        [0, 1, 2, 3, 4],
        "FIFO within the client"
    );
    // a's release, then each of b's five releases, which queued b's next waiter (and handed it
    // the lock): no waiter sent an attempt of its own (each would be one more script).
    let scripts = command_calls(&mut stats, "evalsha").await - scripts;
    assert!(
        scripts <= 7,
        "{scripts} script calls for 5 handoffs (one per release; at most one renewal more)"
    );
    assert_eq!(b.waiting_in_client("cohort"), 0);
    assert_eq!(queued(&conn, "cohort").await, 0, "nobody left in the queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_cohorts_queued_waiter_goes_away_the_next_queues_itself_at_once() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let conn = server.conn().await;
    let holder = hold(&a, "promote", 30).await;
    let first = tokio::spawn({
        let b = b.clone();
        async move { wait_for(&b, "promote", 30).await }
    });
    until_queued(&conn, "promote", 1).await;
    let second = waiter(b.clone(), "promote", 30, || {});
    until_in_client(&b, "promote", 1).await;
    // The queued one goes away: the one waiting in the client behind it queues itself now
    // (not at its next look, a second later), and the first's entry leaves.
    let gone = Instant::now();
    first.abort();
    let _ = first.await;
    until_in_client(&b, "promote", 0).await;
    eventually(Duration::from_secs(5), "the second queued", || async {
        let mut c = conn.clone();
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg("distlock:{promote}:queue")
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await
            .unwrap();
        (members.len() == 1).then_some(())
    })
    .await;
    let promoted = gone.elapsed();
    assert!(
        promoted < Duration::from_millis(700),
        "queued {promoted:?} after the first went away (its own look would come after 1 s)"
    );
    let released = Instant::now();
    holder.release().await.unwrap();
    let took = second.await.unwrap() - released;
    assert!(
        took < Duration::from_millis(500),
        "handed over at once: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_while_waiting_in_the_client_leaves_nothing_behind() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let conn = server.conn().await;
    let holder = hold(&a, "leave", 30).await;
    let first = waiter(b.clone(), "leave", 30, || {});
    until_queued(&conn, "leave", 1).await;
    let second = tokio::spawn({
        let b = b.clone();
        async move { wait_for(&b, "leave", 30).await }
    });
    until_in_client(&b, "leave", 1).await;
    second.abort();
    let _ = second.await;
    until_in_client(&b, "leave", 0).await;
    holder.release().await.unwrap();
    first.await.unwrap();
    b.settle().await;
    assert_eq!(queued(&conn, "leave").await, 0, "nothing queued");
    assert_eq!(
        pttl(&conn, "leave").await,
        -2,
        "the lock is free, not held for nobody"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_tasks_of_several_clients_stay_fair_and_exclusive() {
    let server = RedisServer::start();
    let mut tasks: Vec<Client> = Vec::new();
    for _ in 0..3 {
        let c = client(&server).await;
        // Three tasks of each client: two of them wait in the client, behind a queued one.
        tasks.extend([c.clone(), c.clone(), c]);
    }
    fair_and_exclusive(&tasks, "fair-cohorts", (1, 5)).await;
}

/// A client that reaches `server` through a fault proxy (300 ms response timeout): cut it off
/// with the proxy's black hole, which holds every byte until it is lifted.
async fn behind_a_proxy(server: &RedisServer) -> (testkit::proxy::Proxy, Client) {
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = testkit::proxy::Proxy::start(upstream).await;
    let client = testkit::client_with(proxy.url(), Duration::from_millis(300)).await;
    (proxy, client)
}

/// A grant delivered late (issue 28; reliability row 19's overlap): the release message that
/// handed the lock to a waiter is held up on its subscriber connection until after the window
/// lapsed and another client took the lock, and after the waiter's next attempt found the lock
/// held. The grant predates that attempt, so it says nothing about the lock now: the waiter
/// must not take it as its own while the other client holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_delivered_after_a_later_busy_attempt_is_not_trusted() {
    let server = RedisServer::start();
    let (a, c) = (client(&server).await, client(&server).await);
    let (proxy, b) = behind_a_proxy(&server).await;
    let conn = server.conn().await;
    let first = hold(&a, "late-grant", 5).await;
    // B waits, queued in Redis behind A.
    let b_waiting = tokio::spawn(async move {
        let guard = wait_for(&b, "late-grant", 5)
            .await
            .expect("B takes the lock in the end");
        let took = Instant::now();
        // Checked below: a lock B took while C held it is not B's to release.
        let _ = guard.release().await;
        took
    });
    until_queued(&conn, "late-grant", 1).await;
    // B is cut off: the grant A's release hands it is held up in the proxy.
    proxy.set_blackhole(true);
    first.release().await.unwrap();
    // B's grant window lapses unused and C takes the lock, for 3 s.
    let c_guard = wait_for(&c, "late-grant", 10)
        .await
        .expect("C takes the lock once B's window lapsed");
    let c_took = Instant::now();
    // B comes back: its next attempts find the lock C's, and the held-up grant arrives.
    proxy.set_blackhole(false);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c_released = Instant::now();
    c_guard.release().await.unwrap();
    let b_took = b_waiting.await.unwrap();
    assert!(
        b_took >= c_released,
        "B took the lock {:?} after C did, while C held it (C released {:?} after taking it)",
        b_took - c_took,
        c_released - c_took
    );
}

/// A waiter one of whose attempts timed out (that request may still take the lock late, so
/// the acquire keeps a cleanup armed) and that a release then hands the lock keeps it: the
/// cleanup must not release the lock the new guard holds (issue 28; reliability row 19's
/// overlap: the next waiter was handed the lock while this one held it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_handed_the_lock_after_a_timed_out_attempt_keeps_it() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let (proxy, b) = behind_a_proxy(&server).await;
    let conn = server.conn().await;
    let first = hold(&a, "timed-out", 10).await;
    let b_waiting = tokio::spawn(async move { wait_for(&b, "timed-out", 5).await });
    until_queued(&conn, "timed-out", 1).await;
    // B looks at the lock at least every second: one look times out while it is cut off.
    proxy.set_blackhole(true);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.set_blackhole(false);
    // Requests held up by the cut arrive at once; past the response timeout, the request
    // that queues B next is a fresh one: A's release hands B the lock right after it, so B
    // trusts the grant.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let held_up = queued_id(&conn, "timed-out").await;
    eventually(
        Duration::from_secs(3),
        "B queued by a fresh attempt",
        || {
            let (conn, held_up) = (&conn, held_up.clone());
            async move { (queued_id(conn, "timed-out").await != held_up).then_some(()) }
        },
    )
    .await;
    first.release().await.unwrap();
    let guard = b_waiting.await.unwrap().expect("B is handed the lock");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = conn.clone();
    let holder: Option<String> = redis::cmd("GET")
        .arg("distlock:{timed-out}")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        holder.is_some(),
        "the lock B was handed was let go while B's guard held it"
    );
    guard.release().await.expect("still B's when B releases it");
}

/// The request id recorded for the (one) waiter queued for `name`.
async fn queued_id(conn: &redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    let mut conn = conn.clone();
    redis::cmd("HVALS")
        .arg(format!("distlock:{{{name}}}:queue:ids"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// The values queued for `name`, first first.
async fn queue_members(conn: &redis::aio::MultiplexedConnection, name: &str) -> Vec<Vec<u8>> {
    let mut conn = conn.clone();
    redis::cmd("ZRANGE")
        .arg(format!("distlock:{{{name}}}:queue"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A waiter that waits in the client looks again on its own (at least every second: an
/// attempt of its own, which queues it in Redis); cancelled before that attempt's answer
/// came, it leaves the queue like any other waiter that goes away, and the lock is not handed
/// to it when its turn comes (found by the shuttle check of the cohorts: a waiter queued behind
/// it then waited for a grant that went to nobody, here for that grant's window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_while_its_own_attempt_is_out_leaves_the_queue() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let (proxy, b) = behind_a_proxy(&server).await;
    let conn = server.conn().await;
    let holder = hold(&a, "own-out", 30).await;
    let first = waiter(b.clone(), "own-out", 30, || {});
    until_queued(&conn, "own-out", 1).await;
    let first_value = queue_members(&conn, "own-out").await.remove(0);
    let second = tokio::spawn({
        let b = b.clone();
        async move { wait_for(&b, "own-out", 30).await }
    });
    until_in_client(&b, "own-out", 1).await;
    // The second's own look: Redis queues it, and its answer is lost on the way back (the
    // first's looks, which name its value, pass).
    proxy.fault_next_replies(1, ReplyFault::Drop, move |args| {
        args[0].eq_ignore_ascii_case(b"EVALSHA") && !args.contains(&first_value)
    });
    assert!(
        proxy.wait_faulted(1, Duration::from_secs(5)).await,
        "the second looked again on its own"
    );
    assert_eq!(queued(&conn, "own-out").await, 2, "its attempt queued it");
    // Cancelled while it waits for that answer (300 ms) or pauses after it.
    second.abort();
    assert!(second.await.unwrap_err().is_cancelled());
    b.settle().await;
    assert_eq!(
        queued(&conn, "own-out").await,
        1,
        "the cancelled waiter left the queue"
    );
    holder.release().await.unwrap();
    first.await.unwrap();
    assert_eq!(
        pttl(&conn, "own-out").await,
        -2,
        "the lock is free, not handed to the waiter that went away"
    );
}
