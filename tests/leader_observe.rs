//! `observe()` as an honest follower's view, against real servers: history told from the
//! present (`Observed::Past`), a gap reported when the record no longer reaches back
//! (`Observed::Gap`), a resume from a term (`observe_from`), a leader shown even when its term is
//! below one seen before (never silent while a leader exists), a new identity for the same term
//! (`Leadership::proclaim`), a term a RedLock majority never recorded never shown, and a stream
//! that ends with the error when it cannot observe (no client installed).

use std::time::Duration;

use distlock::{Client, Config, Error, Observed};
use futures_util::{Stream, StreamExt};
use redis::AsyncCommands;
use testkit::RedisServer;

async fn client(config: Config) -> Client {
    config
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// The next item, within 5 s.
async fn next<S: Stream<Item = Result<Observed, Error>> + Unpin>(s: &mut S) -> Observed {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("the observer yields within 5 s")
        .expect("the stream does not end")
        .expect("the observer can observe")
}

/// Items until one shows `term` as the present leader (within 5 s each).
async fn until_leader<S: Stream<Item = Result<Observed, Error>> + Unpin>(
    s: &mut S,
    term: u64,
) -> Vec<Observed> {
    let mut seen = Vec::new();
    while seen
        .last()
        .and_then(|o: &Observed| o.leader())
        .map(|l| l.term)
        != Some(term)
    {
        seen.push(next(s).await);
    }
    seen
}

/// `n` terms one after another (each resigned); their terms.
async fn terms(c: &Client, name: &str, n: usize) -> Vec<u64> {
    let mut terms = Vec::new();
    for _ in 0..n {
        let leadership = c.leader(name).campaign().await.unwrap();
        terms.push(leadership.term());
        leadership.resign().await.unwrap();
    }
    terms
}

#[tokio::test]
async fn more_terms_than_the_record_keeps_between_two_looks_are_a_gap() {
    let server = RedisServer::start();
    let (c, watcher) = (
        client(Config::new(server.url())).await,
        client(Config::new(server.url())).await,
    );
    let first = c.leader("gap").campaign().await.unwrap();
    let mut seen = Box::pin(watcher.leader("gap").observe());
    assert_eq!(
        next(&mut seen).await.leader().map(|l| l.term),
        Some(first.term())
    );
    let t0 = first.term();
    first.resign().await.unwrap();
    // 40 terms while the observer is not polled: the record keeps the last 32.
    let missed = terms(&c, "gap", 40).await;
    let last = c.leader("gap").campaign().await.unwrap();
    let shown = until_leader(&mut seen, last.term()).await;
    assert_eq!(shown[0], Observed::Gap { after: t0 }, "{shown:?}");
    let past: Vec<u64> = shown[1..shown.len() - 1]
        .iter()
        .map(|o| match o {
            Observed::Past(l) => l.term,
            other => panic!("history expected, got {other:?}"),
        })
        .collect();
    // The last 31 of the missed terms (the record's 32 with the present), in order.
    assert_eq!(past, missed[missed.len() - 31..].to_vec());
    last.resign().await.unwrap();
}

#[tokio::test]
async fn an_observer_resumed_from_a_term_replays_what_came_after_it_as_history() {
    let server = RedisServer::start();
    let c = client(Config::new(server.url())).await;
    let done = terms(&c, "resume", 4).await;
    let current = c.leader("resume").campaign().await.unwrap();
    let mut seen = Box::pin(c.leader("resume").observe_from(done[1]));
    let shown = until_leader(&mut seen, current.term()).await;
    let expected: Vec<Observed> = done[2..]
        .iter()
        .map(|&t| Observed::Past(leader_with_term(&shown, t)))
        .chain([shown.last().unwrap().clone()])
        .collect();
    assert_eq!(shown, expected);
    // Resumed from a term the record no longer reaches back to: a gap first.
    let mut seen = Box::pin(c.leader("resume").observe_from(1));
    assert_eq!(next(&mut seen).await, Observed::Gap { after: 1 });
    current.resign().await.unwrap();
}

/// The leader of `shown`'s history with `term`.
fn leader_with_term(shown: &[Observed], term: u64) -> distlock::Leader {
    shown
        .iter()
        .find_map(|o| match o {
            Observed::Past(l) if l.term == term => Some(l.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("term {term} not replayed: {shown:?}"))
}

#[tokio::test]
async fn a_leader_below_a_term_seen_before_is_still_shown() {
    let server = RedisServer::start();
    let c = client(Config::new(server.url())).await;
    let high = c.leader("low").campaign().await.unwrap();
    let mut seen = Box::pin(c.leader("low").observe());
    assert_eq!(
        next(&mut seen).await.leader().map(|l| l.term),
        Some(high.term())
    );
    high.resign().await.unwrap();
    assert_eq!(next(&mut seen).await, Observed::Vacant);
    // A record written by hand (a restored backup, say) names a holder with a lower term.
    let mut conn = server.conn().await;
    let _: () = conn.set("distlock:{low}", "d2:0123abcd:1").await.unwrap();
    let _: () = conn
        .hset_multiple(
            "distlock:{low}:leader",
            &[
                ("term", "7"),
                ("owner", "d2:0123abcd:1"),
                ("identity", "restored"),
                ("since", "1"),
            ],
        )
        .await
        .unwrap();
    let _: () = conn.publish("distlock:{low}:released", "1").await.unwrap();
    let shown = next(&mut seen).await;
    let leader = shown
        .leader()
        .expect("the leader shown, though its term is lower");
    assert_eq!((leader.term, leader.identity.as_str()), (7, "restored"));
}

#[tokio::test]
async fn a_new_identity_for_the_same_term_is_shown() {
    let server = RedisServer::start();
    let c = client(Config::new(server.url())).await;
    let mut leadership = c
        .leader("value")
        .identity("10.0.0.7:8080")
        .campaign()
        .await
        .unwrap();
    let mut seen = Box::pin(c.leader("value").observe());
    let first = next(&mut seen).await;
    assert_eq!(
        first.leader().map(|l| l.identity.as_str()),
        Some("10.0.0.7:8080")
    );
    leadership.proclaim("10.0.0.7:9090").await.unwrap();
    let shown = next(&mut seen).await;
    let leader = shown.leader().expect("the same leader, shown again");
    assert_eq!(
        (leader.term, leader.identity.as_str()),
        (leadership.term(), "10.0.0.7:9090")
    );
    let current = c.leader("value").current().await.unwrap().unwrap();
    assert_eq!(current.identity, "10.0.0.7:9090");
    assert_eq!(leadership.identity(), "10.0.0.7:9090");
    // Its lease as followers see it: about a ttl from the read.
    let until = current.lease_until.expect("the present has a lease");
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    assert!(
        left > Duration::ZERO && left <= Duration::from_secs(30),
        "{left:?}"
    );
    leadership.resign().await.unwrap();
}

#[tokio::test]
async fn over_redlock_a_term_only_a_minority_recorded_is_never_shown() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let c = client(Config::redlock(masters.iter().map(RedisServer::url))).await;
    let leadership = c.leader("minority").campaign().await.unwrap();
    let term = leadership.term();
    leadership.resign().await.unwrap();
    // One master alone records a later term (a proclaim that reached it and no other).
    let mut one = masters[0].conn().await;
    let _: () = one
        .lpush(
            "distlock:{minority}:leader:terms",
            format!("{} 1 nobody", term + 10),
        )
        .await
        .unwrap();
    let next_leader = c.leader("minority").campaign().await.unwrap();
    let mut seen = Box::pin(c.leader("minority").observe_from(term));
    let shown = until_leader(&mut seen, next_leader.term()).await;
    assert!(
        shown
            .iter()
            .all(|o| !matches!(o, Observed::Past(l) if l.term == term + 10)),
        "a term only one master recorded was shown: {shown:?}"
    );
    next_leader.resign().await.unwrap();
}

#[tokio::test]
async fn an_observer_without_a_client_ends_with_the_error() {
    let mut seen = Box::pin(distlock::leader("orphan").client("nobody").observe());
    let first = tokio::time::timeout(Duration::from_secs(2), seen.next())
        .await
        .expect("the observer answers at once");
    assert!(
        matches!(first, Some(Err(Error::UnknownClient { .. }))),
        "{first:?}"
    );
    let after = tokio::time::timeout(Duration::from_secs(2), seen.next()).await;
    assert!(matches!(after, Ok(None)), "{after:?}");
}

#[tokio::test]
async fn a_term_whose_wake_was_missed_is_seen_within_a_ttl() {
    let server = RedisServer::start();
    let c = client(Config::new(server.url())).await;
    let ttl = Duration::from_millis(500);
    let mut seen = Box::pin(c.leader("missed").ttl(ttl).observe());
    assert_eq!(next(&mut seen).await, Observed::Vacant);
    // A leader appears without its wake (as if the message were lost with a connection).
    let mut conn = server.conn().await;
    let _: () = conn
        .set("distlock:{missed}", "d2:0123abcd:1")
        .await
        .unwrap();
    let _: () = conn
        .hset_multiple(
            "distlock:{missed}:leader",
            &[
                ("term", "9"),
                ("owner", "d2:0123abcd:1"),
                ("identity", "quiet"),
                ("since", "1"),
            ],
        )
        .await
        .unwrap();
    let appeared = tokio::time::Instant::now();
    let shown = next(&mut seen).await;
    assert_eq!(shown.leader().map(|l| l.term), Some(9));
    assert!(
        appeared.elapsed() < ttl * 3,
        "seen {:?} after it appeared",
        appeared.elapsed()
    );
}
