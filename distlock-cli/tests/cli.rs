//! The `distlock` binary end to end: a throwaway redis-server (`distlock::testing`), locks held
//! by this test through distlock's API, the built binary run as an operator would, and its
//! output and exit status checked.

use std::process::Stdio;
use std::time::Duration;

use distlock::redis::{self, AsyncCommands};
use distlock::testing::TestRedis;
use distlock::Client;
use tokio::io::{AsyncBufReadExt, BufReader};

mod support;

use support::{client, command, conn, hold, run, run_with};

#[tokio::test]
async fn list_shows_who_holds_what() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let holder = redis.config().install_as("cli-list").await.unwrap();
    let plain = hold(&holder, "order:42").await;
    let fenced = holder
        .lock("report:daily")
        .fenced(true)
        .acquire()
        .await
        .unwrap();
    // Five waiting calls from two other clients (two and three): `QUEUED` 5, `CLIENTS` 2.
    let mut waiters = Vec::new();
    for calls in [2, 3] {
        let other = client(&redis).await;
        for _ in 0..calls {
            let other = other.clone();
            waiters.push(tokio::spawn(async move {
                let guard = other
                    .lock("order:42")
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await;
                guard.is_ok()
            }));
        }
    }
    let mut conn = conn(&redis).await;
    wait_for_subscriber(&mut conn, "distlock:{order:42}:released").await;
    wait_for_queue(&mut conn, "distlock:{order:42}:queue", 5).await;

    let out = run(&["--url", url, "list"]).await;
    out.status(0);
    let pid = std::process::id().to_string();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{}", out.stdout);
    let order = lines.iter().find(|l| l.starts_with("order:42")).unwrap();
    assert!(order.contains(&format!("/{pid} ")), "{order}");
    assert!(order.contains("[cli-list]"), "{order}");
    let cells: Vec<&str> = order.split_whitespace().collect();
    assert_eq!(
        cells[cells.len() - 2..],
        ["5", "2"],
        "five calls queued from two clients: {order}"
    );
    let report = lines
        .iter()
        .find(|l| l.starts_with("report:daily"))
        .unwrap();
    let token = fenced.token().unwrap().to_string();
    assert!(report.contains(&token), "{report}");
    assert!(out
        .stdout
        .contains(&format!("2 locks held under prefix `distlock` on {url}")));

    // A pattern, and JSON for scripts.
    let out = run(&["--url", url, "list", "order:*", "--json"]).await;
    out.status(0);
    let listing: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let locks = listing["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 1, "{listing}");
    assert_eq!(locks[0]["name"], "order:42");
    // Marked by its waiters (`d2:<owner>+`): the owner is the value without the mark.
    let owner: String = conn.get("distlock:{order:42}").await.unwrap();
    assert_eq!(locks[0]["owner"], owner.trim_end_matches('+'));
    assert_eq!(locks[0]["process"]["pid"], std::process::id());
    assert_eq!(locks[0]["process"]["client_name"], "cli-list");
    assert_eq!(locks[0]["queued"], 5);
    assert_eq!(locks[0]["waiting_clients"], 2);
    assert!(locks[0]["ttl_ms"].as_u64().unwrap() <= 30_000);

    plain.release().await.unwrap();
    fenced.release().await.unwrap();
    for waiter in waiters {
        assert!(waiter.await.unwrap(), "every waiter gets the lock in turn");
    }
}

#[tokio::test]
async fn show_one_lock_in_full() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let holder = client(&redis).await;
    let guard = hold(&holder, "invoice:7").await;
    let mut conn = conn(&redis).await;
    let owner: String = conn.get("distlock:{invoice:7}").await.unwrap();

    let out = run(&["--url", url, "show", "invoice:7"]).await;
    out.status(0);
    for expected in [
        "name       invoice:7".to_owned(),
        "key        distlock:{invoice:7}".to_owned(),
        format!("owner      {owner}"),
        format!("pid        {}", std::process::id()),
        "waiting    0 call(s) queued, from 0 client(s)".to_owned(),
    ] {
        assert!(out.stdout.contains(&expected), "{expected}\n{}", out.stdout);
    }
    let json: serde_json::Value = serde_json::from_str(
        &run(&["--url", url, "show", "invoice:7", "--json"])
            .await
            .stdout,
    )
    .unwrap();
    assert_eq!(json["key"], "distlock:{invoice:7}");

    // A free lock, and a name that cannot be a lock's.
    let out = run(&["--url", url, "show", "invoice:8"]).await;
    out.status(3);
    assert_eq!(
        out.stderr,
        "error: no lock `invoice:8` is held under prefix `distlock`\n"
    );
    let out = run(&["--url", url, "show", "invoice:{8}"]).await;
    out.status(2);
    assert!(
        out.stderr.starts_with(
            "error: invalid lock name `invoice:{8}`: a lock name cannot contain `{` or `}`"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn release_needs_force_asks_and_wakes_the_waiters() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let holder = client(&redis).await;
    let guard = hold(&holder, "job").await;
    let other = client(&redis).await;
    let waiter = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let got = other
            .lock("job")
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (got.is_ok(), started.elapsed())
    });
    let mut conn = conn(&redis).await;
    wait_for_subscriber(&mut conn, "distlock:{job}:released").await;
    let owner: String = conn.get("distlock:{job}").await.unwrap();
    // Marked by the waiter (`d2:<owner>+`) or not yet: the owner is the value without the mark.
    let owner = owner.trim_end_matches('+').to_owned();

    let out = run(&["--url", url, "release", "job"]).await;
    out.status(2);
    assert!(out.stderr.contains("pass --force"), "{}", out.stderr);
    let out = run_with(&["--url", url, "release", "job", "--force"], Some("n\n")).await;
    out.status(1);
    assert!(
        out.stderr.contains("release lock `job` held by"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("not released"), "{}", out.stderr);
    assert!(redis.is_locked("job").await, "still held after `n`");

    let out = run(&["--url", url, "release", "job", "--force", "--yes"]).await;
    out.status(0);
    assert!(
        out.stdout
            .starts_with(&format!("released lock `job` held by {owner}")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(&format!("pid {}", std::process::id())));
    assert!(
        out.stdout.contains("woke 1 waiting client(s)"),
        "{}",
        out.stdout
    );
    // The waiter was woken by the release, long before the holder's 30 s ttl.
    let (taken, after) = waiter.await.unwrap();
    assert!(taken && after < Duration::from_secs(5), "{after:?}");
    // The old holder finds out at release.
    assert!(guard.release().await.is_err());

    // The waiter's guard is gone with its task: nothing left to release.
    let out = run(&["--url", url, "release", "job", "--force", "--yes"]).await;
    out.status(3);
    assert_eq!(
        out.stderr,
        "error: no lock `job` is held under prefix `distlock`\n"
    );
}

#[tokio::test]
async fn watch_refreshes_until_ctrl_c() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let holder = client(&redis).await;
    let guard = hold(&holder, "cron:nightly").await;

    let mut child = command(&["--url", url, "watch", "cron:*", "--interval", "100ms"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut frames = 0;
    while frames < 3 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("a frame within 10 s")
            .unwrap()
            .expect("watch keeps running");
        if line.starts_with("cron:nightly") {
            frames += 1;
            // Take and release the lock between frames: acquisitions are counted.
            guard_cycle(&holder, &redis).await;
        }
        seen.push(line);
    }
    assert!(seen[0].starts_with("distlock watch · "), "{seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l.contains(" held · ") && l.ends_with(" acquires/s")),
        "{seen:#?}"
    );
    // The releases between frames are counted (from their notifications).
    let counted = seen.iter().any(|l| {
        l.starts_with("cron:hourly")
            && l.contains("(free)")
            && l.split_whitespace()
                .last()
                .and_then(|r| r.parse::<f64>().ok())
                > Some(0.0)
    });
    assert!(counted, "{seen:#?}");
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("watch quits on Ctrl-C")
        .unwrap();
    assert_eq!(status.code(), Some(0), "a clean exit");
    guard.release().await.unwrap();
}

/// Takes and releases a lock watched by `watch` (one release notification).
/// Takes `cron:hourly`, lets another client queue for it, and releases it: the release hands
/// it over and says so on the release channel (a release nobody waits for is silent).
async fn guard_cycle(client: &Client, redis: &TestRedis) {
    let guard = hold(client, "cron:hourly").await;
    let other = support::client(redis).await;
    let waiter = tokio::spawn(async move {
        let g = other
            .lock("cron:hourly")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        g.release().await.unwrap();
    });
    let mut conn = conn(redis).await;
    let queued = async {
        loop {
            let n: u64 = conn.zcard("distlock:{cron:hourly}:queue").await.unwrap();
            if n > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), queued)
        .await
        .expect("the waiter queued");
    guard.release().await.unwrap();
    waiter.await.unwrap();
}

#[tokio::test]
async fn keys_that_are_not_locks_are_named() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let mut conn = conn(&redis).await;
    let _: () = conn.set("distlock:{greeting}", "hello").await.unwrap();
    let _: () = conn.hset("distlock:{old}", "o", "x").await.unwrap();
    let _: () = conn.set("distlock:{future}", "d3:ab:1").await.unwrap();
    let holder = client(&redis).await;
    let guard = hold(&holder, "fine").await;

    let out = run(&["--url", url, "list"]).await;
    out.status(1);
    assert!(
        out.stdout.contains("fine"),
        "the locks are still listed: {}",
        out.stdout
    );
    let errors: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(errors.len(), 3, "{}", out.stderr);
    assert!(errors[0].starts_with("error: `distlock:{future}` is not a distlock lock: it holds a lock of distlock protocol `d3`"));
    assert!(errors[1]
        .starts_with("error: `distlock:{greeting}` is not a distlock lock: it holds a string"));
    assert!(
        errors[2].starts_with("error: `distlock:{old}` is not a distlock lock: it holds a hash")
    );

    let out = run(&["--url", url, "show", "old"]).await;
    out.status(1);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    let out = run(&["--url", url, "release", "greeting", "--force", "--yes"]).await;
    out.status(1);
    let value: String = conn.get("distlock:{greeting}").await.unwrap();
    assert_eq!(value, "hello", "never deletes what is not a lock");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn bad_servers_and_settings_are_one_line_each() {
    let redis = TestRedis::start().unwrap();
    let port = redis.port();
    let mut conn = conn(&redis).await;
    redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "s3cret"])
        .exec_async(&mut conn)
        .await
        .unwrap();

    let cases = [
        (
            format!("redis://:wrong-pw@127.0.0.1:{port}/"),
            "error: Redis at redis://:***@127.0.0.1:",
            "refused the user name or password",
        ),
        (
            format!("redis://127.0.0.1:{port}/"),
            "error: Redis at redis://127.0.0.1:",
            "requires a password",
        ),
        (
            format!("redis://:s3cret@127.0.0.1:{}/", unused_port()),
            "error: cannot connect to Redis at redis://:***@127.0.0.1:",
            "connection refused",
        ),
        (
            "http://:s3cret@nowhere/".to_owned(),
            "error: `http://:***@nowhere/` is not a valid Redis URL",
            "",
        ),
    ];
    for (url, start, middle) in cases {
        let out = run(&["--url", &url, "list"]).await;
        assert!(out.code == Some(1) || out.code == Some(2), "{out:#?}");
        assert!(out.stderr.starts_with(start), "{url}: {}", out.stderr);
        assert!(out.stderr.contains(middle), "{url}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(!out.stderr.contains("wrong-pw") && !out.stderr.contains("s3cret"));
        assert!(out.stdout.is_empty());
    }

    // The right password, through the environment.
    let url = format!("redis://:s3cret@127.0.0.1:{port}/");
    let out = command(&["list"])
        .env("DISTLOCK_URL", &url)
        .env("DISTLOCK_KEY_PREFIX", "other")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("no locks held under prefix `other` on redis://:***@"),
        "{stdout}"
    );

    // No URL, a bad prefix, a bad duration: usage errors.
    run(&["list"]).await.status(2);
    let out = run(&["--url", &url, "--prefix", "a{b}", "list"]).await;
    out.status(2);
    assert!(out.stderr.contains("key prefix `a{b}`"), "{}", out.stderr);
    run(&["--url", &url, "--timeout", "5", "list"])
        .await
        .status(2);
    // `--help` shows the variable, never its value.
    let out = command(&["--help"])
        .env("DISTLOCK_URL", &url)
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("DISTLOCK_URL") && !help.contains("s3cret"),
        "{help}"
    );
    // Every variable is shown as `[env: NAME]`, never `[env: NAME=]` (an empty value).
    assert!(!help.contains("=]"), "{help}");
}

#[tokio::test]
async fn a_redlock_quorum_is_read_one_master_at_a_time() {
    let masters: Vec<TestRedis> = (0..3).map(|_| TestRedis::start().unwrap()).collect();
    let urls: Vec<String> = masters.iter().map(|m| m.url().to_owned()).collect();
    let holder = distlock::Config::redlock(urls.clone())
        .install_as("cli-redlock")
        .await
        .unwrap();
    let guard = hold(&holder, "order:7").await;
    // Every master granted it and carries the holder's identity record: each names the process.
    for url in &urls {
        let out = run(&["--url", url, "show", "order:7"]).await;
        out.status(0);
        let pid = format!("pid        {}", std::process::id());
        assert!(out.stdout.contains(&pid), "{url}: {}", out.stdout);
        assert!(out.stdout.contains("cli-redlock"), "{url}: {}", out.stdout);
    }
    // The quorum's variable alone is not a server to read: a usage error naming --url.
    let out = command(&["list"])
        .env(
            "DISTLOCK_REDLOCK_MASTERS",
            format!("redis://:s3cret@127.0.0.1:{}/", unused_port()),
        )
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: DISTLOCK_REDLOCK_MASTERS names a RedLock quorum")
            && stderr.contains("pass --url with one of its masters")
            && !stderr.contains("s3cret"),
        "{stderr}"
    );
    guard.release().await.unwrap();
}

/// A loopback port nothing listens on.
fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `channel` has a subscriber (a waiter subscribed before the CLI looks).
async fn wait_for_subscriber(conn: &mut redis::aio::MultiplexedConnection, channel: &str) {
    for _ in 0..500 {
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(conn)
            .await
            .unwrap();
        if counts.first().is_some_and(|(_, n)| *n > 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no subscriber on {channel}");
}

/// Waits until the queue `key` has `n` entries (waiting calls).
async fn wait_for_queue(conn: &mut redis::aio::MultiplexedConnection, key: &str, n: u64) {
    for _ in 0..500 {
        let queued: u64 = conn.zcard(key).await.unwrap();
        if queued == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the queue {key} never had {n} entries");
}

/// One sentinel (`redis-server <file> --sentinel`) watching the master on `master` as
/// `service`, its configuration in its own temporary folder; killed by PID when dropped.
struct Sentinel {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Sentinel {
    fn start(master: u16, service: &str) -> Sentinel {
        let port = unused_port();
        let dir = std::env::temp_dir().join(format!("distlock-cli-sentinel-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("sentinel.conf");
        std::fs::write(
            &file,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\nlogfile \"\"\ndir {}\n\
                 sentinel monitor {service} 127.0.0.1 {master} 1\n",
                dir.display()
            ),
        )
        .unwrap();
        let redis_server =
            std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let child = std::process::Command::new(redis_server)
            .arg(&file)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let sentinel = Sentinel { child, port, dir };
        let client = redis::Client::open(sentinel.url()).unwrap();
        for _ in 0..500 {
            let answered = client
                .get_connection_with_timeout(Duration::from_millis(100))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if answered.is_ok() {
                return sentinel;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the sentinel on port {port} did not answer");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn finds_the_master_through_sentinel() {
    let redis = TestRedis::start().unwrap();
    let sentinel = Sentinel::start(redis.port(), "locks");
    let holder = client(&redis).await;
    let _held = hold(&holder, "order:7").await;
    let master = format!("on redis://127.0.0.1:{}/", redis.port());

    let out = run(&[
        "--sentinel",
        &sentinel.url(),
        "--sentinel-service",
        "locks",
        "list",
    ])
    .await;
    out.status(0);
    assert!(
        out.stdout.contains("order:7") && out.stdout.contains(&master),
        "{out:#?}"
    );

    // From the environment, a sentinel that does not answer first.
    let dead = format!("redis://127.0.0.1:{}", unused_port());
    let mut cmd = command(&["list"]);
    cmd.env("DISTLOCK_SENTINELS", format!("{dead},{}", sentinel.url()))
        .env("DISTLOCK_SENTINEL_SERVICE", "locks");
    let out = cmd.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:#?}");
    assert!(
        stdout.contains("order:7") && stdout.contains(&master),
        "{stdout}"
    );

    // A service the sentinel does not know: one line that names it, status 1.
    let out = run(&[
        "--sentinel",
        &sentinel.url(),
        "--sentinel-service",
        "nope",
        "list",
    ])
    .await;
    out.status(1);
    assert!(
        out.stderr.contains("`nope`") && out.stderr.lines().count() == 1,
        "{out:#?}"
    );
    // --sentinel without the service, or with --url: bad arguments.
    run(&["--sentinel", &sentinel.url(), "list"])
        .await
        .status(2);
    run(&["--sentinel", &sentinel.url(), "--url", redis.url(), "list"])
        .await
        .status(2);
}
