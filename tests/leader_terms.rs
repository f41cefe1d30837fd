//! A leader election's terms never go back, whatever happened between two terms: the record
//! and the fence floor expired (no leader for longer than the retention) or deleted by hand, the
//! server's clock stepped back, a RedLock master that carried the highest term gone; and the
//! fence floor lives as long as the leader leads. Against real servers (the clock steps through
//! `testkit::ShiftedClock`, an `LD_PRELOAD` offset on the servers' wall clock).
//!
//! The highest term a process has seen of a name is kept in that process (the campaign passes
//! it to the proclaim): a candidate in another process that never saw the last term is run as a
//! child process (this binary again), to show what the servers alone guarantee, and what they
//! do not (the module docs' "What would still break it").

use std::time::Duration;

use distlock::{Client, Config};
use redis::AsyncCommands;
use testkit::{ChildTest, RedisServer, ShiftedClock};

/// The child's role: `<name> <config>`, the child campaigns once and prints `term <n>`.
const ROLE: &str = "DISTLOCK_TERMS_CHILD";

async fn client(config: Config) -> Client {
    config
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// Every key of the election `name` (default prefix): lock, fence floor, record, terms list.
fn election_keys(name: &str) -> [String; 4] {
    [
        format!("distlock:{{{name}}}"),
        format!("distlock:{{{name}}}:fence"),
        format!("distlock:{{{name}}}:leader"),
        format!("distlock:{{{name}}}:leader:terms"),
    ]
}

async fn delete_election(server: &RedisServer, name: &str) {
    let mut conn = server.conn().await;
    let _: () = conn.del(&election_keys(name)[..]).await.unwrap();
}

/// The child: campaigns once for the election in its role, prints the term, resigns.
#[tokio::test]
async fn terms_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let (name, urls) = role.split_once(' ').expect("`<name> <urls>`");
    let urls: Vec<&str> = urls.split(',').collect();
    let config = match urls[..] {
        [one] => Config::new(one),
        _ => Config::redlock(urls.iter().copied()),
    };
    let c = client(config).await;
    let leadership = c.leader(name).campaign().await.expect("elected");
    println!("term {}", leadership.term());
    leadership.resign().await.expect("resigned");
}

/// The term a fresh process (one that never saw a term of `name`) is elected with.
async fn term_of_a_fresh_process(name: &str, urls: &[String]) -> u64 {
    let mut child = ChildTest::spawn("terms_child", (ROLE, format!("{name} {}", urls.join(","))));
    let line = child.expect("term ", Duration::from_secs(20)).await;
    let term = line.rsplit("term ").next().unwrap_or_default();
    // It resigns and exits: killed (when dropped) before its resign, it would leave the
    // election held for its ttl.
    assert!(child.wait(Duration::from_secs(10)).await.success());
    term.trim().parse().expect("a term")
}

#[tokio::test]
async fn terms_rise_after_the_record_and_floor_are_deleted_and_the_clock_stepped_back() {
    let (server, clock) = ShiftedClock::server();
    let c = client(Config::new(server.url())).await;
    let first = c.leader("deleted").campaign().await.unwrap();
    let t1 = first.term();
    first.resign().await.unwrap();
    // Everything the servers knew of the name is gone, and their clock is an hour behind: the
    // next token would be an hour below `t1`.
    delete_election(&server, "deleted").await;
    clock.step_back(Duration::from_secs(3600));
    // This process saw `t1`: its next term is above it.
    let again = c.leader("deleted").campaign().await.unwrap();
    assert!(again.term() > t1, "{} after {t1}", again.term());
    let t2 = again.term();
    again.resign().await.unwrap();
    // The record is back: a process that never saw a term of the name is above it too.
    let fresh = term_of_a_fresh_process("deleted", &[server.url()]).await;
    assert!(fresh > t2, "{fresh} after {t2}");
    // What the docs say still breaks it: the servers forgot everything, their clock is behind,
    // and no process that saw the last term campaigns. The operator's remedy (the docs): raise
    // the fence floor above the last term, and the next term is above it.
    delete_election(&server, "deleted").await;
    let forgotten = term_of_a_fresh_process("deleted", &[server.url()]).await;
    assert!(
        forgotten < fresh,
        "a fresh process with the servers' memory gone and their clock behind: {forgotten} (the documented limit)"
    );
    let mut conn = server.conn().await;
    let _: () = conn
        .set("distlock:{deleted}:fence", fresh.max(forgotten))
        .await
        .unwrap();
    let moved = term_of_a_fresh_process("deleted", &[server.url()]).await;
    assert!(
        moved > fresh,
        "moved forward by the operator: {moved} after {fresh}"
    );
}

#[tokio::test]
async fn terms_rise_after_the_retention_passed_with_the_clock_stepped_back() {
    let (server, clock) = ShiftedClock::server();
    let ttl = Duration::from_millis(500);
    let config = || Config::new(server.url()).fence_retention(ttl);
    let c = client(config()).await;
    let first = c.leader("retained").ttl(ttl).campaign().await.unwrap();
    let t1 = first.term();
    first.resign().await.unwrap();
    // No leader for longer than the retention: the record and the floor expire.
    let mut conn = server.conn().await;
    testkit::eventually(Duration::from_secs(5), "the record expired", || {
        let mut conn = conn.clone();
        async move {
            let n: usize = conn.exists(&election_keys("retained")[1..]).await.unwrap();
            (n == 0).then_some(())
        }
    })
    .await;
    clock.step_back(Duration::from_secs(3600));
    let again = c.leader("retained").ttl(ttl).campaign().await.unwrap();
    assert!(again.term() > t1, "{} after {t1}", again.term());
    again.resign().await.unwrap();
    let _: () = conn.del(&election_keys("retained")[..]).await.unwrap();
}

#[tokio::test]
async fn terms_rise_across_a_clock_stepped_back_while_the_record_lives() {
    let (server, clock) = ShiftedClock::server();
    let c = client(Config::new(server.url())).await;
    let first = c.leader("stepped").campaign().await.unwrap();
    let t1 = first.term();
    first.resign().await.unwrap();
    clock.step_back(Duration::from_secs(3600));
    // Another process: only the servers' record and floor keep its term above.
    let fresh = term_of_a_fresh_process("stepped", &[server.url()]).await;
    assert!(fresh > t1, "{fresh} after {t1}");
}

#[tokio::test]
async fn a_leaders_fence_floor_lives_as_long_as_it_leads() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(300);
    let c = client(Config::new(server.url()).fence_retention(ttl)).await;
    let leadership = c.leader("kept").ttl(ttl).campaign().await.unwrap();
    let mut conn = server.conn().await;
    // Six retentions of leading: the floor (renewed with the record) never goes, and stays at
    // the term or above.
    for _ in 0..12 {
        tokio::time::sleep(ttl / 2).await;
        let floor: Option<u64> = conn.get("distlock:{kept}:fence").await.unwrap();
        let floor = floor.expect("the fence floor lives while the leader leads");
        assert!(
            floor >= leadership.term(),
            "{floor} below {}",
            leadership.term()
        );
    }
    leadership.resign().await.unwrap();
}

#[tokio::test]
async fn over_redlock_a_term_one_master_carried_above_the_others_is_written_on_a_majority() {
    let mut masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    // The first master alone remembers a term far above the others' clocks (the others lost
    // it, or never had it).
    let carried: u64 = 5_000_000_000_000_000;
    let mut first = masters[0].conn().await;
    let _: () = first
        .hset_multiple(
            "distlock:{carried}:leader",
            &[("term", carried.to_string()), ("owner", "gone".to_owned())],
        )
        .await
        .unwrap();
    let c = client(Config::redlock(urls.iter().map(String::as_str))).await;
    let leadership = c.leader("carried").campaign().await.unwrap();
    let term = leadership.term();
    assert!(term > carried, "{term}");
    // A majority of the masters wrote that very term, and raised their floors to it.
    for master in &masters[1..] {
        let mut conn = master.conn().await;
        let written: Option<u64> = conn
            .hget("distlock:{carried}:leader", "term")
            .await
            .unwrap();
        let floor: Option<u64> = conn.get("distlock:{carried}:fence").await.unwrap();
        assert_eq!(written, Some(term), "the record on {}", master.url());
        assert!(
            floor >= Some(term),
            "the floor on {}: {floor:?}",
            master.url()
        );
    }
    leadership.resign().await.unwrap();
    // The master that carried the term goes; a process that never saw it is elected by the
    // two left, above it.
    masters[0].kill();
    let next = term_of_a_fresh_process("carried", &urls).await;
    assert!(next > term, "{next} after {term}");
}
