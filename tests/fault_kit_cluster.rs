// Cargo.toml:
// [dev-dependencies]
// distlock = { git = "<this repository's URL>", features = ["testing"] } # not on crates.io yet
// tokio = { version = "1", features = ["macros", "rt", "sync", "time"] }

//! The same faults on a Redis Cluster: `distlock::testing::TestCluster` starts 3 masters on
//! loopback ports, and makes each fault on the node that owns the lock's slot.

use std::time::Duration;

use distlock::testing::TestCluster;
use distlock::LossReason;
use tokio::time::timeout;

/// Long enough for any fault below to be noticed, far shorter than the leases' renewals.
const TOLD_WITHIN: Duration = Duration::from_secs(5);

#[tokio::test]
async fn locks_live_on_every_node_and_come_free() {
    let cluster = TestCluster::start().await.unwrap();
    let client = cluster.config().connect().await.unwrap();
    let names: Vec<String> = (0..30).map(|i| format!("seat:{i}")).collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(client.lock(name.as_str()).acquire().await.unwrap());
    }
    for node in cluster.nodes() {
        let on_it = names
            .iter()
            .filter(|n| cluster.node_of(n).port() == node.port());
        assert!(on_it.count() > 0, "30 names reach every node");
    }
    for name in &names {
        assert!(cluster.is_locked(name).await);
    }
    for guard in held {
        guard.release().await.unwrap();
    }
    for name in &names {
        assert!(!cluster.is_locked(name).await);
    }
}

#[tokio::test]
async fn an_expired_lock_on_its_node_is_noticed_at_once() {
    let cluster = TestCluster::start().await.unwrap();
    let client = cluster.config().connect().await.unwrap();
    let lock = client.lock("order:42").ttl(Duration::from_secs(30));
    let guard = lock.renew(true).acquire().await.unwrap();
    cluster.expire_lock("order:42").await; // deleted on the node that owns the slot
    let told = timeout(TOLD_WITHIN, guard.lost()).await.unwrap();
    assert_eq!(told, LossReason::Expired);
}

#[tokio::test]
async fn a_stolen_lock_goes_to_a_new_holder_with_a_higher_token() {
    let cluster = TestCluster::start().await.unwrap();
    let client = cluster.config().connect().await.unwrap();
    let lock = client.lock("account:7").fenced(true).renew(true);
    let guard = lock.acquire().await.unwrap();
    let new_holder = cluster.steal_lock("account:7").await;
    let told = timeout(TOLD_WITHIN, guard.lost()).await.unwrap();
    assert!(matches!(told, LossReason::Stolen | LossReason::Expired));
    assert!(new_holder.token() > guard.token().unwrap());
    new_holder.release().await.unwrap();
}

#[tokio::test]
async fn a_paused_node_stops_its_slots_only() {
    let cluster = TestCluster::start().await.unwrap();
    let client = cluster.config().connect().await.unwrap();
    // Two names whose slots live on different nodes.
    let names: Vec<String> = (0..30).map(|i| format!("job:{i}")).collect();
    let here = names[0].clone();
    let there = names
        .iter()
        .find(|n| cluster.node_of(n).port() != cluster.node_of(&here).port())
        .unwrap()
        .clone();
    let lock = client.lock(here.as_str()).ttl(Duration::from_secs(1));
    let stalled = lock.renew(true).acquire().await.unwrap();
    let paused = cluster.pause_node_of(&here); // SIGSTOP of that node
    let told = timeout(TOLD_WITHIN, stalled.lost()).await.unwrap();
    assert_eq!(told, LossReason::Unreachable); // its renewals went unanswered
    let elsewhere = client.lock(there.as_str()).acquire().await.unwrap();
    elsewhere.release().await.unwrap(); // another node's slots are served meanwhile
    paused.resume();
    drop(stalled);
    client.settle().await; // its release answered, before the cluster stops
}
