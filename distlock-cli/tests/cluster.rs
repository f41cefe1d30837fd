//! The `distlock` binary on a real local Redis Cluster of 3 masters (`testkit::RedisCluster`),
//! its locks held through `distlock::Config::cluster`: pointed at any one master, it lists
//! every lock of every master, shows each with the clients subscribed on its own shard and
//! the process its owner's identity record (on whichever master) names, releases the right
//! one; a redirect or a master that is down is never a key that "is not a distlock lock".

use std::time::{Duration, Instant};

use distlock::{Client, Config, LockGuard};
use testkit::RedisCluster;
use tokio::io::{AsyncBufReadExt, BufReader};

#[allow(dead_code)]
mod support;

use support::run;

/// Locks held over the cluster's slots.
const LOCKS: usize = 100;

async fn start_cluster() -> RedisCluster {
    tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .unwrap()
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

/// The port of the master serving `key`'s slot.
fn master_of(cluster: &RedisCluster, key: &str) -> u16 {
    let any = cluster.master_ports()[0];
    let slot = cluster.cli(any, &["CLUSTER", "KEYSLOT", key]);
    cluster.master_of_slot(slot.trim().parse().expect("a slot"))
}

async fn client(cluster: &RedisCluster, name: &str) -> Client {
    Config::cluster(cluster.urls())
        .response_timeout(Duration::from_secs(3))
        .install_as(name)
        .await
        .unwrap()
}

async fn hold_all(client: &Client) -> Vec<LockGuard> {
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let guard = client
            .lock(format!("seat:{i}"))
            .ttl(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        guards.push(guard);
    }
    guards
}

/// `list --json` (or `show NAME --json`) through `url`, parsed.
async fn json(args: &[&str]) -> serde_json::Value {
    let out = run(args).await;
    out.status(0);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

#[tokio::test(flavor = "multi_thread")]
async fn any_master_lists_shows_and_releases_every_lock_where_it_lives() {
    let cluster = start_cluster().await;
    let masters = cluster.master_ports();
    assert_eq!(masters.len(), 3);
    let holder = client(&cluster, "cluster-holder").await;
    let _guards = hold_all(&holder).await;
    for &port in &masters {
        let keys: usize = cluster.cli(port, &["DBSIZE"]).trim().parse().unwrap();
        assert!(
            keys > 10,
            "every master holds some of the locks: {port} has {keys} keys"
        );
    }
    // A waiting call from another client: queued 1, one client subscribed on the lock's shard.
    let waiter = client(&cluster, "cluster-waiter").await;
    let waiting = tokio::spawn(async move {
        waiter
            .lock("seat:7")
            .ttl(Duration::from_secs(60))
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    let home = master_of(&cluster, "distlock:{seat:7}");
    let elsewhere = url(*masters.iter().find(|&&p| p != home).unwrap());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let shown = json(&["--url", &elsewhere, "show", "seat:7", "--json"]).await;
        if shown["queued"] == 1 && shown["waiting_clients"] == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter never showed: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let pid = std::process::id();
    for &port in &masters {
        let listing = json(&["--url", &url(port), "list", "--json"]).await;
        let locks = listing["locks"].as_array().unwrap();
        assert_eq!(locks.len(), LOCKS, "every lock, from {port}");
        assert_eq!(listing["masters"]["all"].as_array().unwrap().len(), 3);
        assert_eq!(listing["masters"]["unread"], serde_json::json!([]));
        for lock in locks {
            assert_eq!(lock["process"]["pid"], pid, "{lock}");
            assert_eq!(lock["process"]["client_name"], "cluster-holder", "{lock}");
            let (queued, clients) = match lock["name"] == "seat:7" {
                true => (1, 1),
                false => (0, 0),
            };
            assert_eq!(lock["queued"], queued, "{lock}");
            assert_eq!(lock["waiting_clients"], clients, "{lock}");
        }
        let out = run(&["--url", &url(port), "list"]).await;
        out.status(0);
        let footer = format!(
            "{LOCKS} locks held under prefix `distlock` on {} (a Redis Cluster: 3 of 3 masters read)",
            url(port)
        );
        assert!(out.stdout.contains(&footer), "{}", out.stdout);
        let seat7 = out
            .stdout
            .lines()
            .find(|l| l.starts_with("seat:7 "))
            .unwrap();
        let cells: Vec<&str> = seat7.split_whitespace().collect();
        assert_eq!(cells[cells.len() - 2..], ["1", "1"], "{seat7}");
    }

    // `watch`: every master, each refresh.
    let mut watch = support::command(&[
        "--url",
        &elsewhere,
        "watch",
        "--json",
        "--interval",
        "200ms",
    ])
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let frame = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a frame within 10 s")
        .unwrap()
        .expect("watch keeps running");
    let frame: serde_json::Value = serde_json::from_str(&frame).unwrap();
    assert_eq!(frame["held"], LOCKS, "{frame}");
    assert_eq!(frame["waiting_clients"], 1, "{frame}");
    assert_eq!(frame["masters"]["all"].as_array().unwrap().len(), 3);
    watch.kill().await.unwrap();

    // One lock in full, read through a master that does not hold it.
    let out = run(&["--url", &elsewhere, "show", "seat:7"]).await;
    out.status(0);
    for expected in [
        format!("pid        {pid}"),
        "client     installed as `cluster-holder`".to_owned(),
        "waiting    1 call(s) queued, from 1 client(s)".to_owned(),
    ] {
        assert!(out.stdout.contains(&expected), "{expected}\n{}", out.stdout);
    }
    // Several nodes (`--cluster`), the first of them not answering.
    let mut nodes = vec!["redis://127.0.0.1:1/".to_owned()];
    nodes.extend(cluster.urls());
    let shown = json(&["--cluster", &nodes.join(","), "show", "seat:42", "--json"]).await;
    assert_eq!(shown["process"]["pid"], pid);

    // A forced release through another master: that lock goes, its waiter takes it.
    let before = json(&["--url", &elsewhere, "show", "seat:7", "--json"]).await;
    let out = run(&["--url", &elsewhere, "release", "seat:7", "--force", "--yes"]).await;
    out.status(0);
    assert!(
        out.stdout.contains("woke 1 waiting client(s)"),
        "{}",
        out.stdout
    );
    let taken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter takes the released lock")
        .unwrap()
        .unwrap();
    let listing = json(&["--url", &elsewhere, "list", "--json"]).await;
    let locks = listing["locks"].as_array().unwrap();
    assert_eq!(locks.len(), LOCKS);
    for lock in locks {
        let by = match lock["name"] == "seat:7" {
            true => "cluster-waiter",
            false => "cluster-holder",
        };
        assert_eq!(lock["process"]["client_name"], by, "{lock}");
    }
    assert_ne!(
        locks.iter().find(|l| l["name"] == "seat:7").unwrap()["owner"],
        before["owner"]
    );
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_followed_never_shown_as_a_key_of_another_type() {
    let cluster = start_cluster().await;
    let holder = client(&cluster, "moving-holder").await;
    let guard = holder
        .lock("payment-gateway")
        .fenced(true)
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    // The lock's slot half moved, as `redis-cli --cluster reshard` leaves it between two
    // batches: the lock's key already on the new master, its fence still on the old one, which
    // answers `ASK` for the lock key.
    let key = "distlock:{payment-gateway}";
    let slot = cluster.cli(cluster.master_ports()[0], &["CLUSTER", "KEYSLOT", key]);
    let slot = slot.trim();
    let from = master_of(&cluster, key);
    let to = *cluster.master_ports().iter().find(|&&p| p != from).unwrap();
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    for (port, args) in [
        (to, ["CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id]),
        (from, ["CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id]),
    ] {
        assert!(cluster.cli(port, &args).contains("OK"), "{args:?}");
    }
    let to_port = to.to_string();
    let migrate = [
        "MIGRATE",
        "127.0.0.1",
        &to_port,
        "",
        "0",
        "5000",
        "KEYS",
        key,
    ];
    assert!(cluster.cli(from, &migrate).contains("OK"));
    assert!(cluster.cli(from, &["GET", key]).contains("ASK"));

    for port in cluster.master_ports() {
        let out = run(&["--url", &url(port), "show", "payment-gateway"]).await;
        out.status(0);
        assert!(!out.stderr.contains("not a distlock lock"), "{out:#?}");
        assert!(out
            .stdout
            .contains(&format!("fence      {}", guard.token().unwrap())));
        let out = run(&["--url", &url(port), "list"]).await;
        out.status(0);
        assert!(out.stdout.contains("payment-gateway"), "{out:#?}");
    }
    let out = run(&[
        "--url",
        &url(from),
        "release",
        "payment-gateway",
        "--force",
        "-y",
    ])
    .await;
    out.status(0);
    let out = run(&["--url", &url(from), "show", "payment-gateway"]).await;
    out.status(3);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_that_is_down_is_named_not_taken_for_free_locks() {
    let mut cluster = start_cluster().await;
    let holder = client(&cluster, "down-holder").await;
    let guards = hold_all(&holder).await;
    let masters = cluster.master_ports();
    let (down, up) = (masters[2], masters[0]);
    let on_down = |i: usize| master_of(&cluster, &format!("distlock:{{seat:{i}}}")) == down;
    let held_up = (0..LOCKS).filter(|&i| !on_down(i)).count();
    let a_lock_on_down = (0..LOCKS).find(|&i| on_down(i)).unwrap();
    cluster.kill_node(down);

    // Before the cluster marks it failed: what the others hold, and the one down named.
    let out = run(&["--url", &url(up), "list", "--json"]).await;
    out.status(1);
    let listing: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(listing["locks"].as_array().unwrap().len(), held_up);
    assert_eq!(listing["not_locks"], serde_json::json!([]));
    let unread = listing["masters"]["unread"].as_array().unwrap();
    assert_eq!(unread.len(), 1, "{listing}");
    assert_eq!(unread[0]["node"], format!("127.0.0.1:{down}"));
    assert!(
        out.stderr.starts_with(&format!(
            "error: master 127.0.0.1:{down} of the Redis Cluster could not be read, its locks are not shown: "
        )),
        "{}",
        out.stderr
    );
    let out = run(&["--url", &url(up), "show", &format!("seat:{a_lock_on_down}")]).await;
    out.status(1);
    assert!(!out.stderr.contains("not a distlock lock"), "{out:#?}");
    assert!(!out.stderr.contains("no lock"), "{out:#?}");
    drop(guards);
}
