//! Fenced writes keep one rule on every deployment (issue 49, item 3): the same service code,
//! with one store type (`FencedStore<fence::redis::Connection>`, made from the client its
//! locks use), runs on one server and on a Redis Cluster and finds the same answers there; a
//! key without its lock's hash tag is refused on both (`FenceCrossSlot`: a Cluster's
//! `CROSSSLOT`, checked before sending on one server), and `per_key` keeps its weaker promise
//! on both.

use std::time::Duration;

use distlock::fence::redis::{Connection, FencedStore};
use distlock::testing::{TestCluster, TestRedis};
use distlock::{Client, Error};

const WINDOW: Duration = Duration::from_secs(3600);

/// The service's code under test: one store type, whatever the deployment.
async fn settle(client: &Client, store: &mut FencedStore<Connection>) -> Result<i64, Error> {
    let guard = client.lock("account:7").fenced(true).acquire().await?;
    let fence = guard.fence().expect("a fenced lock has a fence");
    store.claim(&fence).await?;
    store.set("balance:{account:7}", 100, &fence).await?;
    let balance = store
        .get::<i64>("balance:{account:7}")
        .await?
        .expect("written")
        .value;
    // A key without the lock's tag: what a Cluster cannot check in one script.
    let untagged = store.set("balance:account:7", 1, &fence).await;
    assert!(
        matches!(untagged, Err(Error::FenceCrossSlot { .. })),
        "an untagged key was not refused: {untagged:?}"
    );
    // A key tagged for another lock.
    let other = store.set("seatstate:{seat:s1:2}", 1, &fence).await;
    assert!(
        matches!(other, Err(Error::FenceCrossSlot { .. })),
        "a key of another lock's slot was not refused: {other:?}"
    );
    guard.release().await?;
    Ok(balance)
}

/// `per_key` on the same keys: no watermark, each key fenced on its own, anywhere.
async fn per_key(client: &Client, store: FencedStore<Connection>) -> Result<(), Error> {
    let mut store = store.per_key();
    let guard = client.lock("account:8").fenced(true).acquire().await?;
    let fence = guard.fence().expect("a fenced lock has a fence");
    store.set("balance:account:8", 5, &fence).await?;
    store.set("seatstate:{seat:s1:9}", 5, &fence).await?;
    guard.release().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_refuses_what_a_cluster_refuses() {
    let redis = TestRedis::start().unwrap();
    let client = redis.config().connect().await.unwrap();
    let mut store = FencedStore::with_client(&client, WINDOW).unwrap();
    assert_eq!(settle(&client, &mut store).await.unwrap(), 100);
    per_key(&client, FencedStore::with_client(&client, WINDOW).unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_runs_the_same_code_with_the_same_store_type() {
    let cluster = TestCluster::start().await.unwrap();
    let client = cluster.config().connect().await.unwrap();
    let mut store = FencedStore::with_client(&client, WINDOW).unwrap();
    assert_eq!(settle(&client, &mut store).await.unwrap(), 100);
    per_key(&client, FencedStore::with_client(&client, WINDOW).unwrap())
        .await
        .unwrap();
    // The watermark lies with the lock's keys, on the node that owns the lock's slot.
    let node = cluster.node_of("account:7");
    let mut conn = redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let watermark: Option<String> = redis::cmd("GET")
        .arg("distlock:{account:7}:watermark")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        watermark.is_some(),
        "the watermark is not on the lock's node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_client_gives_no_store() {
    let masters: Vec<TestRedis> = (0..3).map(|_| TestRedis::start().unwrap()).collect();
    let urls: Vec<String> = masters.iter().map(|m| m.url().to_owned()).collect();
    let client = distlock::Config::redlock(urls).connect().await.unwrap();
    let refused = FencedStore::with_client(&client, WINDOW);
    assert!(
        matches!(refused, Err(Error::InvalidConfig { .. })),
        "{refused:?}"
    );
}
