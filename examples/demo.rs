//! The README demo: several OS processes share one lock through `#[distributed_lock]`.
//!
//! `cargo run -p distlock-examples --example demo` starts a throwaway `redis-server` (or uses `REDIS_URL`), then
//! re-runs itself as worker processes. Each worker runs tasks that add to a shared Redis
//! counter with a deliberately racy read-modify-write. First without the lock (updates get
//! lost), then with `#[distributed_lock]` (the counter ends exactly right). It prints who held
//! the lock, who waited, who skipped the once-only job, and the fencing tokens. With
//! `DEMO_DISTLOCK_CLI` set to the `distlock` binary (scripts/demo.sh does), it ends with what
//! `distlock list` shows an operator.
//!
//! `cargo run -p distlock-examples --example demo -- --cluster` (or scripts/demo-cluster.sh) runs the same annotated
//! code against a 3-master Redis Cluster it starts itself (redis-server processes stopped by
//! PID at exit): the workers only swap `distlock::init(url)` for `Config::from_env()`, which
//! reads the cluster's nodes from `DISTLOCK_CLUSTER_NODES`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use distlock::distributed_lock;
use redis::AsyncCommands;

const WORKERS: usize = 3;
const TASKS: usize = 4;
const ROUNDS: usize = 5;

#[derive(Debug)]
enum AppError {
    Lock(distlock::Error),
    Redis(redis::RedisError),
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Lock(e) => write!(f, "lock: {e}"),
            AppError::Redis(e) => write!(f, "redis: {e}"),
        }
    }
}

impl From<distlock::Error> for AppError {
    fn from(e: distlock::Error) -> Self {
        AppError::Lock(e)
    }
}

impl From<redis::RedisError> for AppError {
    fn from(e: redis::RedisError) -> Self {
        AppError::Redis(e)
    }
}

/// The racy critical section: read, think, write.
async fn add_one(
    redis: &mut redis::aio::MultiplexedConnection,
    counter: &str,
) -> Result<i64, AppError> {
    let value: i64 = redis.get(counter).await.unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let _: () = redis.set(counter, value + 1).await?;
    Ok(value + 1)
}

/// Protected by a lock whose key comes from the `account` parameter (checked at compile time).
#[distributed_lock(key = "account:<account>", ttl = "2s", renew, wait = "10s", fenced)]
async fn deposit(
    account: &str,
    redis: &mut redis::aio::MultiplexedConnection,
    who: &str,
    called_at: Instant,
) -> Result<(), AppError> {
    let waited = called_at.elapsed();
    let token = distlock::fencing_token().expect("inside the lock");
    let value = add_one(redis, &format!("demo:{{{account}}}:locked")).await?;
    let verb = if waited > Duration::from_millis(1) {
        "waited"
    } else {
        "took  "
    };
    println!(
        "{who} {verb} {:>4.1}ms  holds account:{account}  fencing token {token}  counter -> {value}",
        waited.as_secs_f64() * 1e3
    );
    Ok(())
}

/// Every worker calls this once; only one of them runs it (ShedLock-style `skip`, and
/// `min_hold` so that a worker arriving after the job finished skips too).
#[distributed_lock(key = "nightly-report", ttl = "5s", skip, min_hold = "5s", fenced)]
async fn nightly_report(who: &str) -> Result<bool, AppError> {
    println!(
        "{who} RUNS the once-only job (fencing token {})",
        distlock::fencing_token().unwrap_or(0)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(true)
}

/// The seed nodes of the cluster the demo runs against (`--cluster`), for the workers: the
/// variable `Config::from_env` reads.
const CLUSTER_NODES_VAR: &str = "DISTLOCK_CLUSTER_NODES";

/// `url`: where the demo's counters live (the server, or the cluster master of their slot).
async fn worker(id: usize, url: String) -> Result<(), AppError> {
    // The one line that differs between one server and a Redis Cluster: `from_env` reads
    // `DISTLOCK_CLUSTER_NODES` (or `DISTLOCK_URL`, or `DISTLOCK_SENTINELS`).
    if std::env::var_os(CLUSTER_NODES_VAR).is_some() {
        distlock::Config::from_env()?.install().await?;
    } else {
        distlock::init(&url).await?;
    }
    let redis = redis::Client::open(url)?;
    // Phase 1: the same read-modify-write with no lock.
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let mut conn = redis.get_multiplexed_async_connection().await?;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                add_one(&mut conn, "demo:{shared}:unlocked").await?;
            }
            Ok::<_, AppError>(())
        }));
    }
    for t in tasks {
        t.await.expect("task")?;
    }
    // Phase 2: under #[distributed_lock].
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let mut conn = redis.get_multiplexed_async_connection().await?;
        tasks.push(tokio::spawn(async move {
            let who = format!("[process {id} task {task}]");
            for _ in 0..ROUNDS {
                deposit("shared", &mut conn, &who, Instant::now()).await?;
            }
            Ok::<_, AppError>(())
        }));
    }
    for t in tasks {
        t.await.expect("task")?;
    }
    let who = format!("[process {id}]");
    if !nightly_report(&who).await? {
        println!("{who} skipped the once-only job: another process holds nightly-report");
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        let id = args[2].parse().expect("worker id");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        if let Err(e) = rt.block_on(worker(id, args[3].clone())) {
            eprintln!("worker {id} failed: {e}");
            std::process::exit(1);
        }
        return;
    }

    // `--cluster`: a 3-master cluster of our own; the counters (one hash tag, `{shared}`, so
    // one slot) are read and written on the master that serves their slot.
    let cluster = args
        .iter()
        .any(|a| a == "--cluster")
        .then(|| testkit::RedisCluster::start(3, 0));
    let nodes = cluster.as_ref().map(|c| c.urls().join(","));
    let (server, url) = match (&cluster, std::env::var("REDIS_URL")) {
        (Some(cluster), _) => {
            let master = cluster.master_of_slot(distlock::hash_slot(b"shared"));
            (None, format!("redis://127.0.0.1:{master}/"))
        }
        (None, Ok(url)) => (None, url),
        (None, Err(_)) => {
            let server = testkit::RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    match &cluster {
        Some(cluster) => println!(
            "distlock demo: {WORKERS} processes x {TASKS} tasks x {ROUNDS} increments against a \
             Redis Cluster of 3 masters ({}); counters on {url}\n",
            cluster.urls().join(", ")
        ),
        None => println!(
            "distlock demo: {WORKERS} processes x {TASKS} tasks x {ROUNDS} increments against {url}\n"
        ),
    }
    println!(
        "A fencing token is the number each holder of a lock gets, larger for every later \
         holder (Redis's clock in microseconds, moved past the last one: hence 16 digits). A \
         store that remembers the largest it has seen refuses a write carrying a smaller one: \
         a holder paused past its lease cannot write over a newer holder's work \
         (distlock::fence).\n"
    );
    let exe = std::env::current_exe().expect("current exe");
    let children: Vec<_> = (0..WORKERS)
        .map(|id| {
            let mut worker = Command::new(&exe);
            if let Some(nodes) = &nodes {
                // Exactly one variable may say where Redis is.
                worker
                    .env(CLUSTER_NODES_VAR, nodes)
                    .env_remove("DISTLOCK_URL")
                    .env_remove("DISTLOCK_SENTINELS");
            }
            worker
                .args(["worker", &id.to_string(), &url])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let printers: Vec<_> = children
        .into_iter()
        .map(|mut child| {
            let out = child.stdout.take().expect("stdout");
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    println!("{line}");
                }
                child.wait().expect("wait worker").success()
            })
        })
        .collect();
    let all_ok = printers.into_iter().all(|p| p.join().expect("printer"));

    // An operator's view (scripts/demo.sh passes the `distlock` binary): `nightly-report` is
    // still held for its `min_hold`, by a worker that has exited.
    // (One server only: `distlock list` reads one node's keys.)
    if let (Ok(cli), None) = (std::env::var("DEMO_DISTLOCK_CLI"), &cluster) {
        println!("\n$ distlock --url {url} list");
        let listed = Command::new(cli).args(["--url", &url, "list"]).status();
        if !listed.is_ok_and(|status| status.success()) {
            eprintln!("`distlock list` failed");
        }
    }

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (unlocked, locked): (i64, i64) = rt.block_on(async {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let u: i64 = conn.get("demo:{shared}:unlocked").await.unwrap_or(0);
        let l: i64 = conn.get("demo:{shared}:locked").await.unwrap_or(0);
        let _: () = conn
            .del(&["demo:{shared}:unlocked", "demo:{shared}:locked"])
            .await
            .unwrap();
        (u, l)
    });
    let expected = (WORKERS * TASKS * ROUNDS) as i64;
    println!();
    println!(
        "without a lock: counter = {unlocked:>3} (expected {expected}) -> {} updates lost",
        expected - unlocked
    );
    println!(
        "with the lock:  counter = {locked:>3} (expected {expected}) -> {}",
        if locked == expected {
            "exactly right"
        } else {
            "WRONG"
        }
    );
    if !all_ok || locked != expected {
        // `exit` skips destructors: stop the servers by PID first.
        drop((server, cluster));
        std::process::exit(1);
    }
}
