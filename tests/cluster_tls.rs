//! A Redis Cluster over TLS only (feature `tls`): three masters serving `--tls-port` with
//! `--tls-cluster yes` and `--tls-replication yes`, certificates from a CA made here (`testkit::Pki`);
//! `Config::cluster(["rediss://…"]).tls_root_certificates(ca)`: acquire, wait (woken by sharded
//! pub/sub over TLS) and renew.

use std::time::{Duration, Instant};

use distlock::{hash_slot, Config};
use testkit::{Pki, RedisCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_and_renew_on_a_tls_cluster() {
    let pki = Pki::new("cluster");
    let cluster = RedisCluster::start_tls(3, 0, pki.files(false));
    let urls = cluster.urls();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");
    let config = || {
        Config::cluster(cluster.urls())
            .tls_root_certificates(pki.ca_pem.as_bytes())
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(3))
    };
    let (a, b) = (
        config().connect().await.expect("TLS cluster connect"),
        config().connect().await.expect("TLS cluster connect"),
    );
    // One name per master: every node's TLS connection is used.
    let names: Vec<String> = cluster
        .master_ports()
        .into_iter()
        .map(|master| {
            (0..)
                .map(|n| format!("tls-cluster:{n}"))
                .find(|name| cluster.master_of_slot(hash_slot(name.as_bytes())) == master)
                .unwrap()
        })
        .collect();

    // Renewal: 300 ms leases held for four ttls on every master.
    let mut renewed = Vec::new();
    for name in &names {
        renewed.push(
            a.lock(name.as_str())
                .ttl(Duration::from_millis(300))
                .renew(true)
                .acquire()
                .await
                .expect("acquire over TLS"),
        );
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for (guard, name) in renewed.iter().zip(&names) {
        guard.ensure_held().expect("renewed over TLS");
        let busy = b.lock(name.as_str()).acquire().await.unwrap_err();
        assert!(busy.is_busy(), "{busy}");
    }

    // Waiting: the release message (SPUBLISH, on the subscriber's TLS connection to the
    // lock's shard) wakes each waiter long before a 30 s lease would.
    let mut held = Vec::new();
    for name in &names {
        let long = format!("{name}:wait");
        held.push(
            a.lock(long.as_str())
                .ttl(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap(),
        );
    }
    let mut waiting = Vec::new();
    for name in &names {
        let (b, long) = (b.clone(), format!("{name}:wait"));
        waiting.push(tokio::spawn(async move {
            let guard = b
                .lock(long)
                .wait(Duration::from_secs(15))
                .acquire()
                .await
                .expect("the waiter gets the lock");
            let at = Instant::now();
            guard.release().await.unwrap();
            at
        }));
    }
    testkit::eventually(Duration::from_secs(5), "waiters subscribed", || async {
        (b.waiting_channels() == names.len()).then_some(())
    })
    .await;
    let released_at = Instant::now();
    for guard in held {
        guard.release().await.unwrap();
    }
    for task in waiting {
        let woken_at = task.await.unwrap();
        let waited = woken_at - released_at;
        assert!(
            waited < Duration::from_secs(3),
            "woken by the release, not the ttl: {waited:?}"
        );
    }
    for guard in renewed {
        guard.release().await.expect("release over TLS");
    }
}
