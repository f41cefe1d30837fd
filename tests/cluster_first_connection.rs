//! The first connection tells a Redis Cluster node from a server (issue 49, item 2): a URL of
//! one server (`Config::new`, `init`, `install`; a RedLock master) that reaches a node of a
//! real local Cluster fails at connect with `InvalidConfig` naming `Config::cluster`, before
//! any lock is taken, also for the documented least-privilege user that may not run `INFO`
//! (its `EXISTS` of two slots is refused `CROSSSLOT`). A plain server still connects, with a
//! user refused `INFO`, and with one refused `INFO` and `EXISTS` (not knowing is no error);
//! the reverse mistake, a cluster configuration on a plain server, stays a clear error.

use std::time::{Duration, Instant};

use distlock::{Config, Error};
use testkit::{acl_line, RedisCluster, RedisServer, ACL_PASSWORD};

/// `config` with short timeouts, so that a failure shows quickly.
fn quick(config: Config) -> Config {
    config
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
}

/// The error of connecting with `config`, which must be `InvalidConfig` and come at once; its
/// text.
async fn refused(config: Config) -> String {
    let started = Instant::now();
    let err = quick(config).connect().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused after {:?}",
        started.elapsed()
    );
    err.to_string()
}

/// Asserts that `text` says the server is a Cluster node and names the fix for `url`.
fn names_the_fix(text: &str, url: &str) {
    assert!(
        text.contains(&format!("`{url}` is a Redis Cluster node")),
        "{text}"
    );
    assert!(text.contains("`MOVED`"), "{text}");
    assert!(
        text.contains(&format!("`Config::cluster([\"{url}\"])`")),
        "{text}"
    );
    assert!(text.contains("DISTLOCK_CLUSTER_NODES"), "{text}");
    assert!(text.contains("`cluster_nodes"), "{text}");
}

/// `redis://distlock:<password>@127.0.0.1:<port>/`: the documented user's URL.
fn user_url(port: u16) -> String {
    format!("redis://distlock:{ACL_PASSWORD}@127.0.0.1:{port}/")
}

/// The documented one-server user (without the optional checks: no `INFO`) on the server or
/// node behind `admin`, with `more` rules after it.
async fn one_server_user(admin: &mut redis::aio::MultiplexedConnection, more: &[&str]) {
    acl_line("One server").apply(admin).await;
    if !more.is_empty() {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("distlock")
            .arg(more)
            .query_async(admin)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_given_as_one_server_fails_at_connect_naming_the_fix() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap();
    for url in cluster.urls() {
        names_the_fix(&refused(Config::new(&url)).await, &url);
    }
    let url = cluster.urls().remove(0);
    // `install` (and so `init`) connects first: nothing is installed.
    let err = quick(Config::new(&url))
        .install_as("node")
        .await
        .unwrap_err();
    names_the_fix(&err.to_string(), &url);
    let err = distlock::init(&url).await.unwrap_err();
    names_the_fix(&err.to_string(), &url);
    assert!(matches!(
        distlock::lock("seat:s1:1").acquire().await,
        Err(Error::NotInitialized)
    ));
    // Refused before anything was written: no lock, no identity record.
    for port in cluster.master_ports() {
        let keys = cluster.cli(port, &["KEYS", "*"]);
        assert!(keys.trim().is_empty(), "{keys}");
    }
    // The fix works: the same URL as the cluster's seed.
    let client = quick(Config::cluster([url])).connect().await.unwrap();
    for n in 0..12 {
        let guard = client.lock(format!("seat:s1:{n}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_is_told_from_a_server_without_info() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start_single_master)
        .await
        .unwrap();
    let port = cluster.master_ports()[0];
    let node = cluster.node(port);
    // The documented one-server user may not run `INFO`: its `EXISTS` of two lock keys in
    // two slots is what tells (`CROSSSLOT`), even where the node serves every slot.
    one_server_user(&mut node.conn().await, &[]).await;
    let url = user_url(port);
    let shown = format!("redis://distlock:***@127.0.0.1:{port}/");
    let text = refused(Config::new(&url)).await;
    names_the_fix(&text, &shown);
    assert!(!text.contains(ACL_PASSWORD), "{text}");
    // A RedLock master that is a Cluster node fails the connect, whatever the others do.
    let servers = tokio::task::spawn_blocking(|| [RedisServer::start(), RedisServer::start()])
        .await
        .unwrap();
    let masters = [servers[0].url(), url, servers[1].url()];
    let text = refused(Config::redlock(masters)).await;
    assert!(
        text.contains(&format!(
            "the RedLock master `{shown}` is a Redis Cluster node"
        )),
        "{text}"
    );
    assert!(text.contains("Config::cluster"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_server_still_connects_whatever_its_user_may_run() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let take_and_release = |config: Config| async move {
        let client = quick(config).connect().await.expect("connect");
        let guard = client.lock("seat:s1:1").acquire().await.unwrap();
        guard.release().await.unwrap();
    };
    take_and_release(Config::new(server.url())).await;
    let mut admin = server.conn().await;
    // Refused `INFO` (the documented user without the optional checks).
    one_server_user(&mut admin, &[]).await;
    take_and_release(Config::new(user_url(server.port()))).await;
    // Refused `INFO` and `EXISTS`: not knowing is no error.
    one_server_user(&mut admin, &["-exists"]).await;
    take_and_release(Config::new(user_url(server.port()))).await;
    // A RedLock quorum of plain servers.
    let servers = tokio::task::spawn_blocking(|| [RedisServer::start(), RedisServer::start()])
        .await
        .unwrap();
    let masters = [server.url(), servers[0].url(), servers[1].url()];
    take_and_release(Config::redlock(masters)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_configuration_on_a_plain_server_stays_a_clear_error() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let err = quick(Config::cluster([server.url()]))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("the Redis Cluster of"), "{text}");
    assert!(text.contains("cluster support disabled"), "{text}");
}
