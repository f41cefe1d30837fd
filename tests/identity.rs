//! Client identity records (issue 13): at connect a client writes which process it belongs to
//! under `<prefix>:client:<client id>`, with an expiry, so an operator can turn a lock's owner
//! into a host and a pid.

use std::collections::HashMap;
use std::time::Duration;

use distlock::Config;
use redis::AsyncCommands;
use testkit::RedisServer;

/// The client id in a lock's value (`d2:<client id>:<counter>`, the owner is all of it).
fn client_id(owner: &str) -> &str {
    owner.rsplit_once(':').expect("owner has a counter").0
}

#[tokio::test]
async fn a_lock_owner_leads_to_its_process() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let client = Config::new(server.url())
        .key_prefix("ops")
        .install_as("payments")
        .await
        .unwrap();
    let guard = client.lock("order:42").acquire().await.unwrap();
    let owner: String = conn.get("ops:{order:42}").await.unwrap();
    let key = format!("ops:client:{}", client_id(&owner));
    let record: HashMap<String, String> = conn.hgetall(&key).await.unwrap();
    assert_eq!(record["pid"], std::process::id().to_string(), "{record:?}");
    assert!(!record["host"].is_empty(), "{record:?}");
    assert_eq!(record["name"], "payments");
    let exe = std::env::current_exe().unwrap();
    assert_eq!(record["exe"], exe.file_name().unwrap().to_string_lossy());
    assert!(record["started"].parse::<u64>().is_ok(), "{record:?}");
    // Bounded: the record expires unless its client keeps refreshing it.
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 0 && pttl <= 60_000, "pttl {pttl}");
    guard.release().await.unwrap();

    // One record per client, not per lock or acquisition.
    for n in 0..20 {
        client.lock(format!("order:{n}")).acquire().await.unwrap();
    }
    let records: Vec<String> = redis::cmd("KEYS")
        .arg("ops:client:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(records, [key]);
}

#[tokio::test]
async fn a_server_that_refuses_the_record_still_serves_locks() {
    let server = RedisServer::start();
    // An ACL user that may touch lock keys (and run scripts) but not client records.
    let url = server
        .acl_user("locks", "pw", &["~distlock:{*", "&*", "+@all", "-hset"])
        .await;
    let client = Config::new(url)
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("the record is best effort");
    client
        .lock("job")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let records: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:client:*")
        .query_async(&mut server.conn().await)
        .await
        .unwrap();
    assert!(records.is_empty(), "{records:?}");
}
