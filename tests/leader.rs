//! Leader election (`distlock::leader`) against a real redis-server: candidates elected in
//! turn with rising terms, a resigning leader replaced within one handoff, observers pushed
//! every term in order (and `None` between), `run` cancelling its body when leadership is
//! lost and campaigning again, a deposed leader's fenced writes refused, and terms that stay
//! above a record written by hand.

use std::time::Duration;

use distlock::fence::redis::FencedStore;
use distlock::{Client, Config, Error, Observed};
use futures_util::StreamExt;
use redis::AsyncCommands;
use testkit::RedisServer;
use tokio::time::Instant;

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// The next item of an observer, within 5 s.
async fn next<S: futures_util::Stream<Item = Result<Observed, Error>> + Unpin>(
    s: &mut S,
) -> Observed {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("the observer yields within 5 s")
        .expect("the observer's stream does not end")
        .expect("the observer's client is installed")
}

/// The term of the leader an item shows as the present (`None`: no leader, history or a gap).
fn present(item: &Observed) -> Option<u64> {
    item.leader().map(|l| l.term)
}

#[tokio::test]
async fn candidates_are_elected_in_turn_with_rising_terms() {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let first = a.leader("sched").identity("a").campaign().await.unwrap();
    assert_eq!(first.identity(), "a");
    let current = a.leader("sched").current().await.unwrap().unwrap();
    assert_eq!(
        (current.term, current.identity.as_str()),
        (first.term(), "a")
    );

    let second = tokio::spawn({
        let b = b.clone();
        async move { b.leader("sched").identity("b").campaign().await.unwrap() }
    });
    testkit::until_queued(&server.conn().await, "sched", 1).await;
    let third = tokio::spawn({
        let c = c.clone();
        async move { c.leader("sched").identity("c").campaign().await.unwrap() }
    });
    testkit::until_queued(&server.conn().await, "sched", 2).await;
    assert!(!second.is_finished() && !third.is_finished());

    let term_a = first.term();
    let resigned = Instant::now();
    first.resign().await.unwrap();
    let second = second.await.unwrap();
    let handover = resigned.elapsed();
    assert!(
        handover < Duration::from_millis(200),
        "a resigning leader is replaced within one handoff: {handover:?}"
    );
    assert_eq!(second.identity(), "b", "first come, first elected");
    assert!(second.term() > term_a);
    assert!(!third.is_finished());
    let term_b = second.term();
    drop(second); // a dropped leadership resigns too
    let third = third.await.unwrap();
    assert_eq!(third.identity(), "c");
    assert!(third.term() > term_b);
    third.resign().await.unwrap();
    assert_eq!(a.leader("sched").current().await.unwrap(), None);
}

#[tokio::test]
async fn observers_see_every_term_in_order_and_none_between() {
    let server = RedisServer::start();
    let (leaders, watcher) = (client(&server).await, client(&server).await);
    let mut seen = Box::pin(watcher.leader("jobs").observe());
    assert_eq!(next(&mut seen).await, Observed::Vacant, "no leader yet");
    let mut terms = Vec::new();
    for round in 0..3 {
        let leadership = leaders
            .leader("jobs")
            .identity(format!("round {round}"))
            .campaign()
            .await
            .unwrap();
        let shown = next(&mut seen).await;
        let shown = shown.leader().expect("the new leader");
        assert_eq!(
            (shown.term, shown.identity.as_str()),
            (leadership.term(), format!("round {round}").as_str())
        );
        terms.push(shown.term);
        leadership.resign().await.unwrap();
        assert_eq!(
            next(&mut seen).await,
            Observed::Vacant,
            "no leader after the resign"
        );
    }
    assert!(terms.windows(2).all(|w| w[1] > w[0]), "{terms:?}");

    // A term that begins and ends between two looks is still shown, in order, as history: two
    // terms in a row while the observer is not polled.
    let one = leaders.leader("jobs").campaign().await.unwrap();
    let t1 = one.term();
    one.resign().await.unwrap();
    let two = leaders.leader("jobs").campaign().await.unwrap();
    let t2 = two.term();
    let mut shown = Vec::new();
    while shown.last().and_then(present) != Some(t2) {
        shown.push(next(&mut seen).await);
    }
    assert!(
        matches!(&shown[..], [Observed::Past(p), Observed::Leader(l)] if p.term == t1 && l.term == t2),
        "the missed term as history, then the present: {shown:?}"
    );
    two.resign().await.unwrap();
}

#[tokio::test]
async fn run_cancels_its_body_when_leadership_is_lost_and_campaigns_again() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let runner = tokio::spawn({
        let c = c.clone();
        async move {
            c.leader("cron")
                .ttl(Duration::from_millis(600))
                .run(move |leadership| {
                    let started = started.clone();
                    async move {
                        started.send(leadership.term()).unwrap();
                        // Leads until leadership is lost (the body is then cancelled).
                        std::future::pending::<()>().await;
                    }
                })
                .await
                .unwrap()
        }
    });
    let first = tokio::time::timeout(Duration::from_secs(5), starts.recv())
        .await
        .unwrap()
        .unwrap();
    // Someone deletes the lock: the renewal finds it gone, the body is cancelled, and the
    // candidate is elected again with a higher term.
    let _: () = conn.del("distlock:{cron}").await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), starts.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(second > first, "a new term: {first} then {second}");
    runner.abort();
}

#[tokio::test]
async fn a_deposed_leaders_fenced_writes_are_refused() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut store = FencedStore::new(server.conn().await, Duration::from_secs(60));
    let old = c.leader("writer").campaign().await.unwrap();
    let old_fence = old.fence();
    store
        .set("state:{writer}", "old", &old_fence)
        .await
        .unwrap();
    old.resign().await.unwrap();
    let new = c.leader("writer").campaign().await.unwrap();
    store
        .set("state:{writer}", "new", &new.fence())
        .await
        .unwrap();
    let refused = store
        .set("state:{writer}", "stale", &old_fence)
        .await
        .unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    new.resign().await.unwrap();
}

#[tokio::test]
async fn terms_stay_above_the_last_term_written() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    // As if a fence floor had been lost and the server's clock were far behind.
    let ahead: u64 = 9_000_000_000_000_000;
    let _: () = conn
        .hset_multiple(
            "distlock:{ahead}:leader",
            &[("term", ahead.to_string()), ("owner", "gone".to_owned())],
        )
        .await
        .unwrap();
    let leadership = c.leader("ahead").campaign().await.unwrap();
    assert_eq!(leadership.term(), ahead + 1);
    leadership.resign().await.unwrap();
    let next = c.leader("ahead").campaign().await.unwrap();
    assert!(next.term() > ahead + 1, "{}", next.term());
    next.resign().await.unwrap();
}

#[tokio::test]
async fn over_redlock_terms_rise_and_observers_follow() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let connect = || async {
        Config::redlock(masters.iter().map(RedisServer::url))
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap()
    };
    let (a, b, watcher) = (connect().await, connect().await, connect().await);
    let mut seen = Box::pin(watcher.leader("quorum").observe());
    assert_eq!(next(&mut seen).await, Observed::Vacant);
    let first = a.leader("quorum").identity("a").campaign().await.unwrap();
    assert_eq!(present(&next(&mut seen).await), Some(first.term()));
    let second = tokio::spawn({
        let b = b.clone();
        async move { b.leader("quorum").identity("b").campaign().await.unwrap() }
    });
    let term_a = first.term();
    first.resign().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("b elected after a resigned")
        .unwrap();
    assert!(second.term() > term_a);
    let mut shown = Vec::new();
    while shown.last().and_then(present) != Some(second.term()) {
        shown.push(next(&mut seen).await);
    }
    assert!(
        shown
            .iter()
            .all(|o| present(o).is_none_or(|t| t == second.term())),
        "{shown:?}"
    );
    let current = watcher.leader("quorum").current().await.unwrap().unwrap();
    assert_eq!(
        (current.term, current.identity.as_str()),
        (second.term(), "b")
    );
    second.resign().await.unwrap();
}

/// The body of `run` is inside the election lock's frame, as a lock's `run` body: `fence()`
/// gives the term, and taking the name again re-enters instead of waiting for itself.
#[tokio::test]
async fn a_run_body_sees_its_term_through_fence_and_re_enters_its_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (fence, term, reentry) = c
        .leader("framed")
        .run(|leadership| {
            let c = c.clone();
            async move {
                let fence = distlock::fence().expect("the body's fence");
                let again = c.lock("framed").acquire().await.unwrap();
                let reentry = again.is_reentry();
                again.release().await.unwrap();
                let term = leadership.term();
                leadership.resign().await.unwrap();
                (fence, term, reentry)
            }
        })
        .await
        .unwrap();
    assert_eq!((fence.name(), fence.token()), ("framed", term));
    assert!(
        reentry,
        "taking the election's name inside its body re-enters"
    );
    assert!(matches!(
        distlock::fence(),
        Err(distlock::Error::NotFenced { key: None })
    ));
}

#[tokio::test]
async fn a_leaders_record_lives_while_it_leads_and_expires_after_the_retention() {
    let server = RedisServer::start();
    let retention = Duration::from_millis(600);
    let c = Config::new(server.url())
        .fence_retention(retention)
        .connect()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    let keys = ["distlock:{kept}:leader", "distlock:{kept}:leader:terms"];
    let pttls = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let mut out = Vec::new();
            for key in keys {
                let pttl: i64 = conn.pttl(key).await.unwrap();
                out.push(pttl);
            }
            out
        }
    };
    let leadership = c
        .leader("kept")
        .ttl(Duration::from_millis(300))
        .campaign()
        .await
        .unwrap();
    let term = leadership.term();
    for pttl in pttls(&mut conn).await {
        assert!(pttl > 0 && pttl <= 600, "the record expires: pttl {pttl}");
    }
    // Leading for over three retentions: the leader keeps its record.
    let led_until = Instant::now() + retention * 3;
    while Instant::now() < led_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        for pttl in pttls(&mut conn).await {
            assert!(
                pttl > 0,
                "a leader's record never expires under it: pttl {pttl}"
            );
        }
    }
    let current = c.leader("kept").current().await.unwrap();
    assert_eq!(current.map(|l| l.term), Some(term));
    leadership.resign().await.unwrap();
    // Gone a retention after its last write; nothing left of the election.
    let resigned = Instant::now();
    loop {
        let left: usize = conn.exists(&keys[..]).await.unwrap();
        if left == 0 {
            break;
        }
        assert!(
            resigned.elapsed() < retention + Duration::from_secs(2),
            "the record of a name no longer elected expires"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let next = c.leader("kept").campaign().await.unwrap();
    assert!(next.term() > term, "{} after {term}", next.term());
    next.resign().await.unwrap();
}

#[tokio::test]
async fn a_fence_retention_below_the_ttl_keeps_the_record_a_ttl() {
    let server = RedisServer::start();
    let c = Config::new(server.url())
        .fence_retention(Duration::ZERO)
        .connect()
        .await
        .unwrap();
    let leadership = c
        .leader("short")
        .ttl(Duration::from_millis(900))
        .campaign()
        .await
        .expect("elected with a zero fence retention");
    let pttl: i64 = server
        .conn()
        .await
        .pttl("distlock:{short}:leader")
        .await
        .unwrap();
    assert!(pttl > 0 && pttl <= 900, "kept a ttl: pttl {pttl}");
    let current = c.leader("short").current().await.unwrap();
    assert_eq!(current.map(|l| l.term), Some(leadership.term()));
    leadership.resign().await.unwrap();
}
