//! The `distlock` binary under exactly the least-privilege users `docs/cli.md` gives (read from
//! the doc): `list`, `show`, `release --force` and `watch` work and Redis refuses the user
//! nothing; a user that may not read a lock gets Redis's refusal as one line, never a lock
//! shown as free.

use std::path::PathBuf;
use std::time::Duration;

use distlock::redis;
use distlock::testing::TestRedis;
use tokio::io::{AsyncBufReadExt, BufReader};

mod support;

use support::{client, command, conn, hold, run};

const PASSWORD: &str = "least-privilege";

/// The documented line whose comment (`# ...`) starts with `label`, as arguments, its
/// `>PASSWORD` given [`PASSWORD`].
fn documented(label: &str) -> Vec<String> {
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
    let text = std::fs::read_to_string(doc).expect("read docs/cli.md");
    let mut lines = text.lines().map(str::trim);
    lines
        .by_ref()
        .find(|line| {
            line.strip_prefix("# ")
                .is_some_and(|l| l.starts_with(label))
        })
        .unwrap_or_else(|| panic!("no line for `{label}` in docs/cli.md"));
    let line = lines.next().expect("the ACL line under its comment");
    assert!(line.starts_with("ACL SETUSER distlock-cli "), "{line}");
    line.split_whitespace()
        .map(|word| match word {
            ">PASSWORD" => format!(">{PASSWORD}"),
            other => other.to_owned(),
        })
        .collect()
}

/// Runs `ACL SETUSER distlock-cli` with `args` (after `ACL SETUSER distlock-cli`).
async fn set_user(redis: &TestRedis, args: &[String]) {
    let () = redis::cmd(&args[0])
        .arg(&args[1..])
        .query_async(&mut conn(redis).await)
        .await
        .unwrap_or_else(|e| panic!("{args:?} refused: {e}"));
}

/// The CLI user's URL.
fn url(redis: &TestRedis) -> String {
    format!(
        "redis://distlock-cli:{PASSWORD}@127.0.0.1:{}/",
        redis.port()
    )
}

/// What `ACL LOG` says the CLI's user was refused (`reason`, `object`).
async fn refused(redis: &TestRedis) -> Vec<(String, String)> {
    let entries: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut conn(redis).await)
        .await
        .unwrap();
    let mut out = Vec::new();
    for entry in entries {
        let fields: std::collections::HashMap<String, redis::Value> =
            redis::from_redis_value(entry).unwrap();
        let text = |name: &str| -> String {
            fields
                .get(name)
                .and_then(|v| redis::from_redis_value(v.clone()).ok())
                .unwrap_or_default()
        };
        // redis-rs sends `CLIENT SETINFO` at connect from Redis 7.2 on, and ignores a refusal.
        if text("username") == "distlock-cli" && text("object") != "client|setinfo" {
            out.push((text("reason"), text("object")));
        }
    }
    out
}

#[tokio::test]
async fn every_command_works_under_the_documented_user() {
    let redis = TestRedis::start().unwrap();
    set_user(&redis, &documented("list and show")).await;
    let url = url(&redis);
    let holder = client(&redis).await;
    let guard = hold(&holder, "order:42").await;
    let permit = holder.semaphore("pool", 2).acquire().await.unwrap();

    let out = run(&["--url", &url, "list"]).await;
    out.status(0);
    let pid = std::process::id().to_string();
    let order = out.stdout.lines().find(|l| l.starts_with("order:42 "));
    let order = order.unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(
        order.contains(&format!("/{pid} ")),
        "the holder's process: {order}"
    );
    assert!(out.stdout.contains("pool [1/2]"), "{}", out.stdout);
    let out = run(&["--url", &url, "show", "order:42"]).await;
    out.status(0);
    assert!(out.stdout.contains(&pid), "{}", out.stdout);
    assert_eq!(refused(&redis).await, []);

    set_user(&redis, &documented("release --force")).await;
    let out = run(&["--url", &url, "release", "order:42", "--force", "--yes"]).await;
    out.status(0);
    let exists: bool = redis::cmd("EXISTS")
        .arg("distlock:{order:42}")
        .query_async(&mut conn(&redis).await)
        .await
        .unwrap();
    assert!(!exists, "released by force");
    drop(guard);
    set_user(&redis, &documented("watch")).await;
    let mut child = command(&["--url", &url, "watch", "--interval", "100ms"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
    let first = first.expect("a frame within 10 s").unwrap();
    assert!(first.is_some_and(|l| l.starts_with("distlock watch · ")));
    child.kill().await.unwrap();
    assert_eq!(refused(&redis).await, []);
    permit.release().await.unwrap();
}

#[tokio::test]
async fn a_read_the_user_may_not_make_is_refused_in_one_line() {
    let redis = TestRedis::start().unwrap();
    set_user(&redis, &documented("list and show")).await;
    let take_away = ["ACL", "SETUSER", "distlock-cli", "-zrange"].map(str::to_owned);
    set_user(&redis, &take_away).await;
    let holder = client(&redis).await;
    let _guard = hold(&holder, "order:42").await;
    let out = run(&["--url", &url(&redis), "list"]).await;
    out.status(1);
    assert!(out.stdout.is_empty(), "no table: {}", out.stdout);
    let line = out.stderr.trim();
    assert!(
        line.contains("does not permit this for the URL's user")
            && line.contains("'zrange' command"),
        "{line}"
    );
    assert!(!line.contains(PASSWORD), "{line}");
}
