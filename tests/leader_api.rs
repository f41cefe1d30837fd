//! What followers of etcd, client-go and Curator expect of a leader election, against real
//! servers: a `LeaderWatch` a task can ask without the `Leadership`, a liveness check that turns
//! unhealthy when a leader keeps acting past its lease, `serve` that stays a candidate after the
//! body returns, `on_lost` telling the caller why a body was cancelled, a pause between campaigns
//! when terms keep being lost as soon as won, and a term's record on the replicas before the
//! leader is told it leads (`min_replicas`), and no term handed out whose lease ran out before it
//! was counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::leader::{LeaderHealth, Lost};
use distlock::{Config, Error, LossReason};
use redis::AsyncCommands;
use testkit::{quick_client, RedisServer};
use tokio::time::Instant;

#[tokio::test]
async fn a_watch_says_whether_its_term_leads_without_the_leadership() {
    let server = RedisServer::start();
    let c = quick_client(&server).await;
    let leadership = c.leader("watched").campaign().await.unwrap();
    let watch = leadership.watch();
    assert!(watch.is_leader() && leadership.is_leader());
    assert_eq!(watch.term(), leadership.term());
    assert_eq!(watch.fence(), leadership.fence());
    watch.ensure_held().unwrap();
    let worker = tokio::spawn({
        let watch = watch.clone();
        async move { watch.lost().await }
    });
    leadership.resign().await.unwrap();
    assert_eq!(worker.await.unwrap(), LossReason::Released);
    assert!(!watch.is_leader());
    assert!(matches!(
        watch.ensure_held(),
        Err(Error::Lost {
            reason: LossReason::Released,
            ..
        })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_body_does_not_yield_past_its_lease_is_unhealthy_until_it_goes() {
    let server = RedisServer::start();
    let c = quick_client(&server).await;
    let health = LeaderHealth::new(Duration::from_millis(200));
    let ttl = Duration::from_millis(300);
    let (led_tx, led_rx) = std::sync::mpsc::channel();
    let url = server.url();
    let leader = tokio::spawn({
        let (c, health) = (c.clone(), health.clone());
        async move {
            c.leader("stuck")
                .ttl(ttl)
                .health(&health)
                .run(|leadership| {
                    let led_tx = led_tx.clone();
                    let url = url.clone();
                    async move {
                        led_tx.send(()).unwrap();
                        // The lock taken from under it (deleted: the next renewal finds it
                        // gone) while the body blocks its thread: `run` cannot cancel it.
                        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                        let _: () = redis::cmd("DEL")
                            .arg("distlock:{stuck}")
                            .query(&mut conn)
                            .unwrap();
                        std::thread::sleep(Duration::from_millis(1500));
                        leadership.resign().await
                    }
                })
                .await
        }
    });
    // Checked from a thread of its own (the runtime's threads may be blocked).
    let probe = health.clone();
    let (healthy_while_leading, unhealthy) = tokio::task::spawn_blocking(move || {
        let health = probe;
        led_rx.recv().unwrap();
        let healthy = health.check().is_ok();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            if let Err(overdue) = health.check() {
                return (healthy, overdue);
            }
            assert!(std::time::Instant::now() < deadline, "never unhealthy");
            std::thread::sleep(Duration::from_millis(10));
        }
    })
    .await
    .unwrap();
    assert!(healthy_while_leading);
    assert_eq!(unhealthy.name, "stuck");
    assert!(unhealthy.past_lease > Duration::from_millis(200));
    assert_ne!(unhealthy.reason, LossReason::Released);
    // Once the body yields, `run` drops it (and its Leadership): healthy again, and still a
    // candidate (elected again).
    testkit::eventually(Duration::from_secs(5), "healthy again", || {
        let healthy = health.check().is_ok();
        async move { healthy.then_some(()) }
    })
    .await;
    leader.abort();
}

#[tokio::test]
async fn serve_stays_a_candidate_after_its_body_returns() {
    let server = RedisServer::start();
    let c = quick_client(&server).await;
    let bodies = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let serving = tokio::spawn({
        let (c, bodies, terms) = (c.clone(), bodies.clone(), terms.clone());
        async move {
            c.leader("served")
                .serve(|leadership| {
                    let (bodies, terms) = (bodies.clone(), terms.clone());
                    async move {
                        terms.lock().unwrap().push(leadership.term());
                        bodies.fetch_add(1, Ordering::SeqCst);
                        // Returns at once: handed over, and campaigned for again.
                    }
                })
                .await
        }
    });
    testkit::eventually(Duration::from_secs(10), "three terms served", || {
        let bodies = bodies.clone();
        async move { (bodies.load(Ordering::SeqCst) >= 3).then_some(()) }
    })
    .await;
    serving.abort();
    let terms = terms.lock().unwrap().clone();
    assert!(terms.windows(2).all(|w| w[1] > w[0]), "{terms:?}");
}

#[tokio::test]
async fn on_lost_says_why_a_body_was_cancelled_and_quick_losses_pause_the_campaigns() {
    let server = RedisServer::start();
    let c = quick_client(&server).await;
    let lost = Arc::new(Mutex::new(Vec::<Lost>::new()));
    let started = Instant::now();
    let serving = tokio::spawn({
        let (c, lost) = (c.clone(), lost.clone());
        async move {
            c.leader("thief")
                .ttl(Duration::from_millis(300))
                .on_lost(move |l| lost.lock().unwrap().push(l.clone()))
                .run(|_leadership| std::future::pending::<()>())
                .await
        }
    });
    // A thief deletes the election's lock every 20 ms: each term is lost at its next renewal.
    let mut conn = server.conn().await;
    while started.elapsed() < Duration::from_secs(3) {
        let _: () = conn.del("distlock:{thief}").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    serving.abort();
    let lost = lost.lock().unwrap().clone();
    assert!(!lost.is_empty(), "no loss reported");
    assert!(
        lost.iter()
            .all(|l| l.name == "thief" && l.reason == LossReason::Expired),
        "{lost:?}"
    );
    // Renewals every 100 ms find it gone: without the pauses (15 ms doubling to 200 ms) some
    // 25 terms in 3 s; with them, far fewer.
    assert!(lost.len() <= 15, "{} terms lost in 3 s", lost.len());
}

#[tokio::test]
async fn with_min_replicas_the_terms_record_is_on_the_replica_when_the_leader_is_told() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let c = Config::new(master.url())
        .replica_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let mut on_replica = replica.conn().await;
    for _ in 0..5 {
        let leadership = c
            .leader("replicated")
            .min_replicas(1)
            .campaign()
            .await
            .unwrap();
        let term: Option<u64> = on_replica
            .hget("distlock:{replicated}:leader", "term")
            .await
            .unwrap();
        assert_eq!(term, Some(leadership.term()));
        leadership.resign().await.unwrap();
    }
}

#[tokio::test]
async fn a_body_that_drops_its_leadership_leads_until_it_completes() {
    let server = RedisServer::start();
    let (c, other) = (quick_client(&server).await, quick_client(&server).await);
    let (held_midway, led_by) = c
        .leader("dropped")
        .identity("a")
        // The body drops its `Leadership` at once (`|_| ...`): it goes back to `run`.
        .run(|_| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let led_by = other.leader("dropped").current().await.unwrap();
            (distlock::ensure_held(), led_by.map(|l| l.identity))
        })
        .await
        .unwrap();
    held_midway.expect("still leading while the body runs");
    assert_eq!(led_by.as_deref(), Some("a"));
    // Let go once the body completed.
    testkit::eventually(Duration::from_secs(2), "no leader", || {
        let other = other.clone();
        async move {
            other
                .leader("dropped")
                .current()
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn the_candidates_in_line_are_listed_leader_first_in_the_order_they_will_be_elected() {
    let server = RedisServer::start();
    let (a, b, c) = (
        quick_client(&server).await,
        quick_client(&server).await,
        quick_client(&server).await,
    );
    let first = a.leader("line").identity("a").campaign().await.unwrap();
    let second = tokio::spawn({
        let b = b.clone();
        async move { b.leader("line").identity("b").campaign().await.unwrap() }
    });
    testkit::until_queued(&server.conn().await, "line", 1).await;
    let third = tokio::spawn({
        let c = c.clone();
        async move { c.leader("line").identity("c").campaign().await.unwrap() }
    });
    testkit::until_queued(&server.conn().await, "line", 2).await;
    let line = |cands: Vec<distlock::leader::Candidate>| {
        cands
            .into_iter()
            .map(|c| (c.identity.unwrap_or_default(), c.leading))
            .collect::<Vec<_>>()
    };
    let seen = line(a.leader("line").candidates().await.unwrap());
    assert_eq!(
        seen,
        [("a".into(), true), ("b".into(), false), ("c".into(), false)]
    );
    first.resign().await.unwrap();
    let second = second.await.unwrap();
    let seen = line(c.leader("line").candidates().await.unwrap());
    assert_eq!(seen, [("b".into(), true), ("c".into(), false)]);
    // A candidate that stops campaigning leaves the line.
    third.abort();
    let _ = third.await;
    testkit::eventually(Duration::from_secs(3), "c left the line", || {
        let a = a.clone();
        async move {
            let seen = line(a.leader("line").candidates().await.unwrap());
            (seen == [("b".to_owned(), true)]).then_some(())
        }
    })
    .await;
    second.resign().await.unwrap();
}

#[tokio::test]
async fn over_redlock_the_candidates_are_those_a_majority_queued() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let connect = || async {
        Config::redlock(masters.iter().map(RedisServer::url))
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    let first = a.leader("line").identity("a").campaign().await.unwrap();
    let second = tokio::spawn({
        let b = b.clone();
        async move { b.leader("line").identity("b").campaign().await.unwrap() }
    });
    let seen = testkit::eventually(Duration::from_secs(3), "b in line", || {
        let a = a.clone();
        async move {
            let seen: Vec<_> = a
                .leader("line")
                .candidates()
                .await
                .unwrap()
                .into_iter()
                .map(|c| (c.identity.unwrap_or_default(), c.leading))
                .collect();
            (seen.len() == 2).then_some(seen)
        }
    })
    .await;
    assert_eq!(seen, [("a".to_owned(), true), ("b".to_owned(), false)]);
    first.resign().await.unwrap();
    second.await.unwrap().resign().await.unwrap();
}

/// A campaign whose proclaim is answered only after its lease ran out (the leader stalled, or
/// the answer was held up, with the term already written) does not hand out that term: the
/// lock may have gone to another candidate meanwhile, who counted a higher term. It campaigns
/// again, and the leadership it returns is held (found by the protocol model's RedLock walks,
/// where the stale term's `distlock_leader` and health check started for a lost term).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_proclaimed_after_its_lease_ran_out_is_not_handed_out() {
    let server = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let proxy = testkit::proxy::Proxy::start(upstream).await;
    let c = testkit::client_with(proxy.url(), Duration::from_secs(5)).await;
    // The first proclaim's answer comes 2 s late; meanwhile nothing passes for 1.5 s (the
    // renewals neither): the 1 s lease runs out before the answer is read.
    let proclaim = redis::Script::new(distlock::scripts::LEADER_PROCLAIM)
        .get_hash()
        .to_owned();
    // Loaded already, so the first proclaim runs at once (not a NOSCRIPT sent again late).
    let mut conn = server.conn().await;
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(distlock::scripts::LEADER_PROCLAIM)
        .query_async(&mut conn)
        .await
        .unwrap();
    proxy.fault_next_replies(
        1,
        testkit::proxy::ReplyFault::Delay(Duration::from_secs(2)),
        move |args| args.len() > 1 && args[1].eq_ignore_ascii_case(proclaim.as_bytes()),
    );
    let campaign = tokio::spawn(
        c.leader("late-proclaim")
            .identity("late-leader")
            .ttl(Duration::from_secs(1))
            .campaign(),
    );
    assert!(proxy.wait_faulted(1, Duration::from_secs(5)).await);
    proxy.set_blackhole(true);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    proxy.set_blackhole(false);
    let leadership = campaign.await.unwrap().unwrap();
    leadership
        .ensure_held()
        .expect("the leadership handed out is held");
    assert!(leadership.is_leader());
    leadership.resign().await.unwrap();
}
