//! Over RedLock, observers are shown the term the leader holds and nothing else (issue 48, item
//! 6): a leader's records on a minority of masters can be ahead of the term a majority wrote,
//! and `current()` and `observe()` must not show it. Against real servers, one master behind a
//! proxy that holds its answers back.
//!
//! How a minority gets ahead: a master that carries a term above the others' (the others lost
//! it, or never had it) answers the proclaim's first round after the call's response timeout.
//! The others wrote the leader's token and settled on it; the late master had written its own
//! last term plus one, for the same hold. The leader fences with the majority's term; the late
//! master's record stays ahead for the whole term (a proclaim never lowers the record of its
//! own hold).

use std::time::Duration;

use distlock::{Client, Config, Error, Observed};
use futures_util::{Stream, StreamExt};
use redis::AsyncCommands;
use testkit::proxy::{Proxy, ReplyFault};
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

/// The term the last master alone carries, far above the others' clocks.
const CARRIED: u64 = 5_000_000_000_000_000;

/// A leader of `name` elected over three masters, the last of which carried [`CARRIED`] and
/// answered the first proclaim late (its answer held back 1.5 s, past the 500 ms timeout), so
/// its record of this hold is ahead of the majority's term; the first master behind a proxy
/// the test slows down.
struct Ahead {
    _masters: Vec<RedisServer>,
    slow: Proxy,
    _late: Proxy,
    last: redis::aio::MultiplexedConnection,
    client: Client,
    leadership: distlock::Leadership,
    term: u64,
}

/// Three reads of `name`'s leader through `c`, each showing `term`, the term the leader holds.
async fn three_reads_show(c: &Client, name: &str, term: u64) {
    for _ in 0..3 {
        let shown = c.leader(name).current().await.unwrap().map(|l| l.term);
        assert_eq!(
            shown,
            Some(term),
            "current() shows the term the leader holds"
        );
    }
}

async fn elected_with_a_record_ahead(name: &str) -> Ahead {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // The first master answers slowly when the test says so, the last one's first proclaim
    // answers after the call's timeout.
    let slow = Proxy::to(&masters[0]).await;
    let late = Proxy::to(&masters[2]).await;
    let mut last = masters[2].conn().await;
    let _: () = last
        .hset_multiple(
            format!("distlock:{{{name}}}:leader"),
            &[("term", CARRIED.to_string()), ("owner", "gone".to_owned())],
        )
        .await
        .unwrap();
    // Loaded already, so the proclaim runs there at once (not a NOSCRIPT sent again late).
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(distlock::scripts::LEADER_PROCLAIM)
        .query_async(&mut last)
        .await
        .unwrap();
    let proclaim = redis::Script::new(distlock::scripts::LEADER_PROCLAIM)
        .get_hash()
        .to_owned();
    late.fault_next_replies(1, ReplyFault::Delay(Duration::from_millis(1_500)), {
        move |args| args.len() > 1 && args[1].eq_ignore_ascii_case(proclaim.as_bytes())
    });
    let urls = [slow.url(), masters[1].url(), late.url()];
    let client = client(Config::redlock(urls.iter().map(String::as_str))).await;
    let leadership = client
        .leader(name)
        .identity("leader")
        .campaign()
        .await
        .unwrap();
    let term = leadership.term();
    assert!(late.wait_faulted(1, Duration::from_secs(5)).await);
    assert!(term < CARRIED, "the majority's term is the token: {term}");
    // The held-back answer has passed: the late master wrote the leader's hold its own term,
    // ahead of the majority's.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let recorded: Option<u64> = last
        .hget(format!("distlock:{{{name}}}:leader"), "term")
        .await
        .unwrap();
    assert_eq!(recorded, Some(CARRIED + 1), "the late master's record");
    Ahead {
        _masters: masters,
        slow,
        _late: late,
        last,
        client,
        leadership,
        term,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_a_late_master_wrote_ahead_of_the_majoritys_term_is_not_shown() {
    let name = "ahead";
    // Every part bound: the servers and proxies live until the test ends.
    let Ahead {
        _masters: _servers,
        slow,
        _late: _late_proxy,
        last: _last,
        client: c,
        leadership,
        term,
    } = elected_with_a_record_ahead(name).await;
    // From now on the first master answers last, so a read has the late master's record and
    // one of the majority's before the third.
    slow.set_latency(Duration::from_millis(200));
    three_reads_show(&c, name, term).await;
    let mut seen = Box::pin(c.leader(name).observe());
    match next(&mut seen).await {
        Observed::Leader(leader) => assert_eq!(leader.term, term, "observe() shows it too"),
        other => panic!("expected the leader, got {other:?}"),
    }
    drop(seen);
    slow.set_latency(Duration::ZERO);
    leadership.resign().await.unwrap();
}

/// The same record ahead, when the leader shows a new identity for its term: the masters of
/// the majority write it at the term, the late master (whose record of this hold is ahead, and
/// never lowered) at its own. The identity is written on a majority with the leader's term, so
/// `proclaim` succeeds (it returned `Err(Lost)` while the master ahead made the count look for
/// a majority at its term), and `current()` shows the new identity with the leader's term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_proclaims_a_new_identity_over_a_record_ahead_on_a_minority() {
    let name = "ahead-identity";
    let Ahead {
        _masters: _servers,
        slow,
        _late: _late_proxy,
        mut last,
        client: c,
        mut leadership,
        term,
    } = elected_with_a_record_ahead(name).await;
    // Reads until the late master answers again (its held-back answer timed out: it was known
    // to be down, and a call would be decided without it); the first master answers last, so
    // the proclaim counts the late master's answer.
    slow.set_latency(Duration::from_millis(200));
    three_reads_show(&c, name, term).await;
    leadership
        .proclaim("leader-2")
        .await
        .expect("the new identity is written on a majority with the leader's term");
    slow.set_latency(Duration::ZERO);
    assert_eq!(leadership.term(), term, "the term is unchanged");
    assert_eq!(leadership.identity(), "leader-2");
    assert!(leadership.is_leader(), "still the leader");
    let shown = c.leader(name).current().await.unwrap().expect("a leader");
    assert_eq!(
        (shown.term, shown.identity.as_str()),
        (term, "leader-2"),
        "current() shows the new identity with the leader's term"
    );
    // The late master shows it too, at its own term (never lowered).
    let identity: Option<String> = last
        .hget(format!("distlock:{{{name}}}:leader"), "identity")
        .await
        .unwrap();
    assert_eq!(identity.as_deref(), Some("leader-2"));
    leadership.resign().await.unwrap();
}
