//! Replica acknowledgement (`min_replicas`) against a real master and its replica: the acquire
//! and every renewal run `WAIT` on the lock's node; too few acknowledgements release the lock
//! and say how many there were, and unacknowledged renewals lose the lease. A replica frozen
//! with SIGSTOP is what makes `WAIT` time out.

use std::time::{Duration, Instant};

use distlock::{distributed_lock, Config, Error, LossReason};
use redis::AsyncCommands;
use testkit::RedisServer;

fn config(master: &RedisServer) -> Config {
    Config::new(master.url()).replica_timeout(Duration::from_millis(100))
}

#[tokio::test]
async fn acquire_and_renewals_are_acknowledged_by_a_replica() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let client = config(&master).connect().await.unwrap();
    let guard = client
        .lock("acked")
        .ttl(Duration::from_millis(300))
        .renew(true)
        .min_replicas(1)
        .acquire()
        .await
        .expect("acknowledged by the replica");
    // The replica has the lock as soon as the acquire returns (WAIT), not eventually.
    let on_replica: Option<String> = replica.conn().await.get("distlock:{acked}").await.unwrap();
    assert!(on_replica.is_some_and(|v| v.starts_with("d2:")));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    guard
        .ensure_held()
        .expect("acknowledged renewals keep the lease");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn too_few_acknowledgements_release_the_lock_and_say_how_many() {
    let master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master);
    let client = config(&master).connect().await.unwrap();
    let started = Instant::now();
    let error = client
        .lock("two-replicas")
        .min_replicas(2)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Unreplicated {
                acknowledged: 1,
                required: 2,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("1 of the 2 required"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "bounded by the replica timeout"
    );
    // Released again: nobody holds it.
    let exists: bool = master
        .conn()
        .await
        .exists("distlock:{two-replicas}")
        .await
        .unwrap();
    assert!(!exists, "an unacknowledged lock is released");
    // The client default applies to locks that do not choose.
    let strict = config(&master).min_replicas(2).connect().await.unwrap();
    let error = strict.lock("default").acquire().await.unwrap_err();
    assert!(matches!(error, Error::Unreplicated { .. }), "{error}");
    strict
        .lock("default")
        .min_replicas(1)
        .run(async {})
        .await
        .unwrap();
}

#[tokio::test]
async fn a_frozen_replica_fails_the_acquire_and_loses_a_renewed_lease() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let client = config(&master).connect().await.unwrap();
    let renewed = client
        .lock("frozen")
        .ttl(Duration::from_millis(600))
        .renew(true)
        .min_replicas(1)
        .acquire()
        .await
        .unwrap();
    replica.pause();
    // Renewals keep extending the key on the master, but none is acknowledged: the lease runs
    // out and says why.
    let reason = tokio::time::timeout(Duration::from_secs(3), renewed.lost())
        .await
        .expect("the unacknowledged lease is lost");
    assert_eq!(reason, LossReason::Unreplicated);
    drop(renewed);
    let error = client
        .lock("frozen-2")
        .min_replicas(1)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Unreplicated {
                acknowledged: 0,
                required: 1,
                ..
            }
        ),
        "{error}"
    );
    // Locks that ask for no acknowledgement are not held up.
    client.lock("plain").run(async {}).await.unwrap();
    replica.resume();
}

#[distributed_lock(
    key = "ledger:<account>",
    ttl = "5s",
    min_replicas = 1,
    client = "replicated"
)]
async fn settle(account: u64) -> Result<u64, Error> {
    Ok(account)
}

#[tokio::test]
async fn the_attribute_asks_for_acknowledgement() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    config(&master).install_as("replicated").await.unwrap();
    assert_eq!(settle(7).await.unwrap(), 7);
    replica.pause();
    let error = settle(8).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::Unreplicated {
                acknowledged: 0,
                required: 1,
                ..
            }
        ),
        "{error}"
    );
    replica.resume();
}
