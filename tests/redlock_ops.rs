//! What operators read from a RedLock deployment (`Config::redlock`, five real `redis-server`s
//! from the testkit): every master carries each client's identity record (so whichever master
//! the `distlock` CLI is pointed at, a lock's owner leads to its process), a master that is
//! down at connect neither fails the connect nor stays without the record once it is back.

use std::collections::HashMap;
use std::time::Duration;

use distlock::{Client, Config};
use redis::AsyncCommands;
use testkit::{eventually, RedisServer};

const MASTERS: usize = 5;

fn masters() -> Vec<RedisServer> {
    (0..MASTERS).map(|_| RedisServer::start()).collect()
}

fn config(masters: &[RedisServer]) -> Config {
    Config::redlock(masters.iter().map(RedisServer::url))
        .key_prefix("ops")
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
}

/// The key of the identity record of `client`'s owner on the lock `name`, read on `master`
/// (the client id is the owner without its counter: `d2:<client id>:<n>`).
async fn record_key_of_holder(master: &RedisServer, name: &str) -> String {
    let owner: String = master
        .conn()
        .await
        .get(format!("ops:{{{name}}}"))
        .await
        .expect("this master holds the lock");
    let client_id = owner.rsplit_once(':').expect("owner has a counter").0;
    format!("ops:client:{client_id}")
}

/// Asserts that `master` holds `key`: the record of this process, named `name`, expiring.
async fn assert_record(master: &RedisServer, key: &str, name: &str) {
    let mut conn = master.conn().await;
    let record: HashMap<String, String> = conn.hgetall(key).await.unwrap();
    assert_eq!(
        record.get("pid"),
        Some(&std::process::id().to_string()),
        "master {}: {record:?}",
        master.port()
    );
    assert_eq!(record.get("name").map(String::as_str), Some(name));
    assert!(record.get("host").is_some_and(|h| !h.is_empty()));
    let pttl: i64 = conn.pttl(key).await.unwrap();
    assert!(pttl > 0 && pttl <= 60_000, "pttl {pttl}");
    // One record per client, nothing else under the client records' prefix.
    let records: Vec<String> = redis::cmd("KEYS")
        .arg("ops:client:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(records, [key], "master {}", master.port());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_live_master_has_the_identity_record() {
    let mut masters = masters();
    // Down at connect: a minority may be, and the record must not fail the connect.
    masters[3].kill();
    let client: Client = config(&masters)
        .install_as("redlock-ops-live")
        .await
        .expect("connect with a master down");
    let guard = client.lock("order:42").acquire().await.unwrap();
    let live: Vec<&RedisServer> = masters
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, m)| m)
        .collect();
    let key = record_key_of_holder(live[0], "order:42").await;
    for master in &live {
        // Each live master granted the lock (a majority did) and carries the record.
        assert_eq!(record_key_of_holder(master, "order:42").await, key);
        assert_record(master, &key, "redlock-ops-live").await;
    }
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_down_at_connect_gets_the_record_at_the_next_refresh() {
    let mut masters = masters();
    masters[0].kill();
    let client = config(&masters)
        .install_as("redlock-ops-late")
        .await
        .expect("connect with the first master down");
    let guard = client.lock("job").acquire().await.unwrap();
    let key = record_key_of_holder(&masters[1], "job").await;
    masters[0].restart();
    let conn = masters[0].conn().await;
    // Refreshed every 20 s on every master; the first refresh after the restart writes it.
    eventually(
        Duration::from_secs(25),
        "the record on the restarted master",
        || {
            let (mut conn, key) = (conn.clone(), key.clone());
            async move {
                let exists: bool = conn.exists(&key).await.unwrap();
                exists.then_some(())
            }
        },
    )
    .await;
    assert_record(&masters[0], &key, "redlock-ops-late").await;
    guard.release().await.unwrap();
}

#[tokio::test]
async fn connect_fails_when_no_majority_of_masters_is_reachable() {
    let mut masters = masters();
    // Two of five down: a majority is left, the client starts.
    masters[0].kill();
    masters[1].kill();
    let client = config(&masters).connect().await;
    assert!(client.is_ok(), "3 of 5 masters up: {:?}", client.err());
    // Three of five down: as a connect to one server that is down, it fails, promptly.
    masters[2].kill();
    let started = std::time::Instant::now();
    let refused = config(&masters).connect().await;
    let took = started.elapsed();
    match refused {
        Err(distlock::Error::Connect { .. } | distlock::Error::ConnectTimeout { .. }) => {}
        other => panic!("expected a connect error with 2 of 5 masters up, got {other:?}"),
    }
    assert!(took < Duration::from_secs(3), "the refusal took {took:?}");
}
