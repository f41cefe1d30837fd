//! Sets of locks (`distlock::lock_all`) held by other processes: this test binary started
//! again as a holder (`MULTI_CHILD`), which a test `SIGKILL`s (its locks free within its ttl)
//! or `SIGSTOP`s (told `Lost`, its locks taken by another), and as racers (`MULTI_RACE`) making
//! transfers between accounts kept in Redis, in random key order with `from == to` now and
//! then, conserving the total without deadlock.

use std::process::{Command, Stdio};
use std::time::Duration;

use distlock::{Config, Error};
use redis::AsyncCommands;
use testkit::{quick_client as client, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

/// A tiny random source (no dependency): xorshift seeded per task.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const ACCOUNTS: u64 = 5;
const START: i64 = 1000;

/// The holder process: when `MULTI_CHILD` is set (`a,b,ttl ms,url`), takes the set `[a, b]`
/// with renewal, prints `held`, and runs a body that never ends; if the set is lost it prints
/// `lost: <reason>`.
#[tokio::test]
async fn child_holder() {
    let Ok(spec) = std::env::var("MULTI_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (a, b, ttl, url) = (parts[0], parts[1], parts[2], parts[3]);
    let client = Config::new(url).connect().await.unwrap();
    let result = client
        .lock_all([a, b])
        .ttl(Duration::from_millis(ttl.parse().unwrap()))
        .renew(true)
        .run(async {
            println!("held");
            std::future::pending::<()>().await
        })
        .await;
    match result {
        Err(Error::Lost { reason, .. }) => println!("lost: {reason}"),
        other => println!("ended: {other:?}"),
    }
}

/// A holder process of a set; killed when dropped.
struct Holder {
    child: tokio::process::Child,
    pid: u32,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Holder {
    async fn start(server: &RedisServer, names: [&str; 2], ttl: Duration) -> Holder {
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", "child_holder", "--nocapture", "--test-threads=1"])
            .env(
                "MULTI_CHILD",
                format!(
                    "{},{},{},{}",
                    names[0],
                    names[1],
                    ttl.as_millis(),
                    server.url()
                ),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = child.spawn().unwrap();
        let pid = child.id().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut holder = Holder {
            child,
            pid,
            lines: BufReader::new(stdout).lines(),
        };
        holder.expect("held", Duration::from_secs(20)).await;
        holder
    }

    async fn expect(&mut self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no `{prefix}` from the holder within {within:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("the holder ended before `{prefix}`"));
            if line.contains(prefix) {
                return line;
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success() || signal == "CONT");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.signal("CONT");
        let _ = self.child.start_kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_locks_are_free_within_its_ttl() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1500);
    let holder = Holder::start(&server, ["acct:k1", "acct:k2"], ttl).await;
    let c = client(&server).await;
    assert!(c.lock("acct:k1").acquire().await.unwrap_err().is_busy());
    assert!(c.lock("acct:k2").acquire().await.unwrap_err().is_busy());
    let killed = Instant::now();
    holder.signal("KILL");
    let guard = c
        .lock_all(["acct:k2", "acct:k1"])
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the killed holder's locks come free");
    let freed = killed.elapsed();
    eprintln!("a SIGKILLed set holder's locks (ttl {ttl:?}) were taken {freed:?} after the kill");
    assert!(
        freed <= ttl + Duration::from_millis(300),
        "free after {freed:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_is_told_lost_and_its_locks_go_to_another() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1000);
    let mut holder = Holder::start(&server, ["acct:p1", "acct:p2"], ttl).await;
    holder.signal("STOP");
    let c = client(&server).await;
    let guard = c
        .lock_all(["acct:p2", "acct:p1"])
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the stalled holder's locks expire");
    holder.signal("CONT");
    let line = holder.expect("lost", Duration::from_secs(5)).await;
    assert!(line.contains("lease") || line.contains("expired"), "{line}");
    guard.ensure_held().unwrap();
    guard.release().await.unwrap();
}

/// Racers in several processes: while `MULTI_RACE` is set (`prefix,rounds,url`), three tasks
/// make transfers between accounts kept in Redis (`bal:<n>`, read and written with a pause in
/// between), naming the two locks in random order, `from == to` included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_racer() {
    let Ok(spec) = std::env::var("MULTI_RACE") else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (prefix, rounds, url) = (parts[0], parts[1], parts[2]);
    let client = Config::new(url).connect().await.unwrap();
    let store = redis::Client::open(url).unwrap();
    let mut tasks = Vec::new();
    for t in 0..3u64 {
        let (client, store, prefix) = (client.clone(), store.clone(), prefix.to_owned());
        let rounds: usize = rounds.parse().unwrap();
        let mut rng = Rng(std::process::id() as u64 * 31 + t * 7 + 1);
        tasks.push(tokio::spawn(async move {
            let mut conn = store.get_multiplexed_async_connection().await.unwrap();
            for _ in 0..rounds {
                let (from, to) = (rng.below(ACCOUNTS), rng.below(ACCOUNTS));
                let amount = rng.below(50) as i64;
                let (a, b) = (format!("{prefix}:{from}"), format!("{prefix}:{to}"));
                let names = match rng.below(2) {
                    0 => [a, b],
                    _ => [b, a],
                };
                let guard = client
                    .lock_all(names)
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let f: i64 = conn.get(format!("bal:{from}")).await.unwrap();
                let t: i64 = conn.get(format!("bal:{to}")).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                if from != to {
                    let _: () = conn.set(format!("bal:{from}"), f - amount).await.unwrap();
                    let _: () = conn.set(format!("bal:{to}"), t + amount).await.unwrap();
                }
                let _: i64 = conn.incr("transfers", 1).await.unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    println!("done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_across_processes_conserve_the_total() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    for a in 0..ACCOUNTS {
        let _: () = conn.set(format!("bal:{a}"), START).await.unwrap();
    }
    let mut children = Vec::new();
    for _ in 0..4 {
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", "child_racer", "--nocapture", "--test-threads=1"])
            .env("MULTI_RACE", format!("pacct,20,{}", server.url()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        children.push(child.spawn().unwrap());
    }
    for child in children {
        let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .expect("the racers finish: no deadlock")
            .unwrap();
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("done"));
    }
    let mut sum = 0;
    for a in 0..ACCOUNTS {
        let b: i64 = conn.get(format!("bal:{a}")).await.unwrap();
        sum += b;
    }
    let transfers: i64 = conn.get("transfers").await.unwrap();
    eprintln!("{transfers} transfers across 4 processes; total {sum}");
    assert_eq!(transfers, 4 * 3 * 20);
    assert_eq!(sum, START * ACCOUNTS as i64);
}
