//! The `distlock` binary on each kind of hold besides the lock: a semaphore's permits, readers,
//! a set of locks, a leader election — what `list` and `show` say, and `release --force`.

use std::time::Duration;

use distlock::redis::AsyncCommands;
use distlock::testing::TestRedis;

// The CLI tests' shared helpers: this file uses some of them.
#[allow(dead_code)]
mod support;

use support::{client, conn, hold, run};

#[tokio::test]
async fn a_semaphore_shows_its_permits_and_is_released_by_force() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let holder = client(&redis).await;
    let take = || {
        holder
            .semaphore("api:acme", 5)
            .ttl(Duration::from_secs(30))
            .acquire()
    };
    let (first, second) = (take().await.unwrap(), take().await.unwrap());

    let out = run(&["--url", url, "list"]).await;
    out.status(0);
    assert_eq!(
        out.stdout.matches("api:acme [2/5]").count(),
        2,
        "{}",
        out.stdout
    );
    let out = run(&["--url", url, "list", "--json"]).await;
    out.status(0);
    let listing: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let locks = listing["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 2);
    assert_eq!(locks[0]["permits"]["in_use"], 2);
    assert_eq!(locks[0]["permits"]["of"], 5);
    assert!(locks[0].get("permits").is_some());

    let out = run(&["--url", url, "show", "api:acme"]).await;
    out.status(0);
    assert_eq!(
        out.stdout.matches("2 of 5 in use").count(),
        2,
        "{}",
        out.stdout
    );

    let out = run(&["--url", url, "release", "api:acme", "--force", "--yes"]).await;
    out.status(0);
    assert!(
        out.stdout
            .starts_with("released lock `api:acme` (2 of 5 permits) held by"),
        "{}",
        out.stdout
    );
    assert!(!redis.is_locked("api:acme").await);
    let mut conn = conn(&redis).await;
    assert!(!conn.exists::<_, bool>("distlock:{api:acme}").await.unwrap());
    // The holders find out at release.
    assert!(first.release().await.is_err());
    assert!(second.release().await.is_err());
    let out = run(&["--url", url, "show", "api:acme"]).await;
    out.status(3);
}

#[tokio::test]
async fn readers_show_as_a_shared_hold_and_are_released_by_force() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let holder = client(&redis).await;
    let take = || {
        holder
            .lock("doc:7")
            .read()
            .ttl(Duration::from_secs(30))
            .acquire()
    };
    let (first, second) = (take().await.unwrap(), take().await.unwrap());

    let out = run(&["--url", url, "list"]).await;
    out.status(0);
    assert_eq!(
        out.stdout.matches("doc:7 [read 2]").count(),
        2,
        "{}",
        out.stdout
    );
    let out = run(&["--url", url, "list", "--json"]).await;
    out.status(0);
    let listing: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let locks = listing["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 2);
    assert_eq!(locks[0]["readers"], 2);
    assert!(locks[0].get("permits").is_none());

    let out = run(&["--url", url, "show", "doc:7"]).await;
    out.status(0);
    assert_eq!(
        out.stdout.matches("2 holding it for reading").count(),
        2,
        "{}",
        out.stdout
    );

    let out = run(&["--url", url, "release", "doc:7", "--force", "--yes"]).await;
    out.status(0);
    assert!(
        out.stdout
            .starts_with("released lock `doc:7` (2 readers) held by"),
        "{}",
        out.stdout
    );
    let mut conn = conn(&redis).await;
    assert!(!conn.exists::<_, bool>("distlock:{doc:7}").await.unwrap());
    assert!(first.release().await.is_err());
    assert!(second.release().await.is_err());
}

#[tokio::test]
async fn a_set_shows_every_lock_and_each_is_released_by_force() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let holder = client(&redis).await;
    let set = holder
        .lock_all(["account:7", "account:3"])
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let _alone = hold(&holder, "account:9").await;

    let out = run(&["--url", url, "list"]).await;
    out.status(0);
    assert!(
        out.stdout.contains("account:3 [set of 2]"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("account:7 [set of 2]"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("account:9 [set"), "{}", out.stdout);
    // A pattern that matches one lock of the set still shows its set.
    let out = run(&["--url", url, "list", "account:3", "--json"]).await;
    out.status(0);
    assert!(
        out.stdout.contains(r#""account:3","#) && out.stdout.contains(r#""account:7""#),
        "{}",
        out.stdout
    );

    let out = run(&["--url", url, "show", "account:7"]).await;
    out.status(0);
    assert!(
        out.stdout.contains("account:3, account:7"),
        "{}",
        out.stdout
    );

    // One lock of the set released by force: the holder finds the set lost.
    let out = run(&["--url", url, "release", "account:7", "--force", "--yes"]).await;
    out.status(0);
    assert!(!redis.is_locked("account:7").await);
    assert!(redis.is_locked("account:3").await);
    let out = run(&["--url", url, "release", "account:3", "--force", "--yes"]).await;
    out.status(0);
    assert!(!redis.is_locked("account:3").await);
    assert!(set.release().await.is_err());
}

#[tokio::test]
async fn a_leader_shows_its_term_and_identity() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let candidate = client(&redis).await;
    let leadership = candidate
        .leader("scheduler")
        .identity("http://10.0.0.7:8080")
        .campaign()
        .await
        .unwrap();
    let out = run(&["--url", url, "list"]).await;
    out.status(0);
    assert!(out.stdout.contains("scheduler [leader]"), "{}", out.stdout);
    let out = run(&["--url", url, "show", "scheduler"]).await;
    out.status(0);
    let expected = format!(
        "leader     term {} of the election `scheduler`, led by http://10.0.0.7:8080 for",
        leadership.term()
    );
    assert!(out.stdout.contains(&expected), "{expected}\n{}", out.stdout);
    let json: serde_json::Value = serde_json::from_str(
        &run(&["--url", url, "show", "scheduler", "--json"])
            .await
            .stdout,
    )
    .unwrap();
    assert_eq!(json["leader"]["term"], leadership.term());
    assert_eq!(json["leader"]["identity"], "http://10.0.0.7:8080");
    leadership.resign().await.unwrap();
}
