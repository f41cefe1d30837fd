//! The README demo: several OS processes share one lock through `#[distributed_lock]`.
//!
//! `cargo run -p distlock-examples --example demo` starts a throwaway `redis-server` (or uses `REDIS_URL`), then
//! re-runs itself as worker processes. Each worker runs tasks that add to a shared Redis
//! counter with a deliberately racy read-modify-write. First without the lock (updates get
//! lost), then with `#[distributed_lock]` (the counter ends exactly right). It prints who held
//! the lock, who waited, who skipped the once-only job, and the fencing tokens. With
//! `DEMO_DISTLOCK_CLI` set to the `distlock` binary (scripts/demo.sh does), it ends with what
//! `distlock list` shows an operator. It then shows what the fencing tokens are for: a holder
//! paused past its lease (a GC pause, a stopped VM, `SIGSTOP`) writes with its old token
//! through `distlock::fence::redis::FencedStore` after the next holder wrote, and is refused
//! with `Error::Fenced` (while the same late write as a plain `SET` overwrites the newer
//! holder's). It first names the server it talks to, from `INFO server` (Redis or Valkey, and
//! its version): the one at `REDIS_URL`, or the one it starts (`REDIS_SERVER` picks its binary).
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

/// The server at `url`, as its `INFO server` names it: `Redis 7.0.15`, `Valkey 8.1.8`.
async fn server_version(url: &str) -> Result<String, AppError> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    Ok(server_name(&info))
}

/// The server's name and version from an `INFO server` reply. Valkey reports a
/// `redis_version` too (the Redis it is compatible with, 7.2.4): its own comes first.
fn server_name(info: &str) -> String {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    match (field("valkey_version"), field("redis_version")) {
        (Some(valkey), _) => format!("Valkey {valkey}"),
        (None, Some(redis)) => format!("Redis {redis}"),
        (None, None) => "a server whose INFO names no version".to_owned(),
    }
}

/// The lock of the fencing scene, and the store's key for it: the lock's hash tag, so that
/// the key and the lock's watermark share a slot in a Redis Cluster.
const LEDGER: &str = "ledger";
const LEDGER_KEY: &str = "entries:{ledger}";
/// The same entries written with plain `SET`s, for the contrast.
const LEDGER_PLAIN_KEY: &str = "entries:{ledger}:plain";

/// Holder A's lease in the fencing scene: it is not renewed, as a paused process renews
/// nothing, so it runs out this long after A took the lock.
const PAUSED_LEASE: Duration = Duration::from_millis(500);

/// What the fencing scene saw.
#[derive(Debug)]
struct FencingScene {
    /// Holder A's token, and B's (taken after A's lease ran out).
    a_token: u64,
    b_token: u64,
    /// A's late write through the fenced store: refused, if fencing works.
    a_late_write: Result<(), distlock::Error>,
    /// The entry the store holds at the end, and the token that wrote it.
    stored: (String, u64),
    /// The plain copy at the end: A's late `SET` lands over B's entry.
    plain: String,
}

/// What fencing tokens are for: holder A writes, is paused past its lease, B takes the lock
/// and writes, and A, resuming, writes with its old token. The fenced store refuses A; a plain
/// `SET` of the same late write overwrites B's entry. A and B are clients of their own (as two
/// processes are), made by `connect`; `store_url` is the Redis the entries are written to (in
/// a Cluster, the master of the lock's slot).
async fn fencing_scene<F, Fut>(connect: F, store_url: &str) -> Result<FencingScene, AppError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<distlock::Client, distlock::Error>>,
{
    use distlock::fence::redis::FencedStore;
    // The connection through `distlock::redis`: the redis-rs (1.x) `FencedStore` takes.
    let mut plain = distlock::redis::Client::open(store_url)?
        .get_multiplexed_async_connection()
        .await?;
    // How late a fence may still arrive here: far longer than the scene.
    let mut store = FencedStore::new(plain.clone(), Duration::from_secs(60));
    let (a, b) = (connect().await?, connect().await?);

    let a_guard = a
        .lock(LEDGER)
        .fenced(true)
        .ttl(PAUSED_LEASE)
        .renew(false)
        .acquire()
        .await?;
    let a_fence = a_guard.fence().expect("taken fenced");
    store.claim(&a_fence).await?;
    store.set(LEDGER_KEY, "entry 1 by A", &a_fence).await?;
    let _: () = plain.set(LEDGER_PLAIN_KEY, "entry 1 by A").await?;
    println!(
        "[holder A] holds {LEDGER} (fencing token {}), writes \"entry 1 by A\" -> ok",
        a_fence.token()
    );
    println!(
        "[holder A] is paused before its next write (a GC pause, a stopped VM, SIGSTOP): its \
         {} ms lease runs out, and it does not know",
        PAUSED_LEASE.as_millis()
    );

    let asked = Instant::now();
    let b_guard = b
        .lock(LEDGER)
        .fenced(true)
        .wait(Duration::from_secs(5))
        .acquire()
        .await?;
    let b_fence = b_guard.fence().expect("taken fenced");
    store.claim(&b_fence).await?;
    store.set(LEDGER_KEY, "entry 2 by B", &b_fence).await?;
    let _: () = plain.set(LEDGER_PLAIN_KEY, "entry 2 by B").await?;
    println!(
        "[holder B] takes {LEDGER} after waiting {} ms (fencing token {}), claims the store, \
         writes \"entry 2 by B\" -> ok",
        asked.elapsed().as_millis(),
        b_fence.token()
    );

    // A resumes where it was paused: it still believes it holds the lock, and writes.
    println!(
        "[holder A] resumes, still believing it holds {LEDGER}, writes \"entry 2 by A\" with \
         token {}",
        a_fence.token()
    );
    let a_late_write = store.set(LEDGER_KEY, "entry 2 by A", &a_fence).await;
    match &a_late_write {
        Err(refused @ distlock::Error::Fenced { .. }) => {
            println!("[holder A] -> REFUSED, nothing written: {refused}")
        }
        other => println!("[holder A] -> NOT REFUSED: {other:?}"),
    }
    let _: () = plain.set(LEDGER_PLAIN_KEY, "entry 2 by A").await?;
    b_guard.release().await?;
    drop(a_guard);

    let stored = store
        .get::<String>(LEDGER_KEY)
        .await?
        .expect("the entry was written");
    let stored = (stored.value, stored.token);
    let plain_now: String = plain.get(LEDGER_PLAIN_KEY).await?;
    let _: () = plain.del(&[LEDGER_KEY, LEDGER_PLAIN_KEY]).await?;
    Ok(FencingScene {
        a_token: a_fence.token(),
        b_token: b_fence.token(),
        a_late_write,
        stored,
        plain: plain_now,
    })
}

/// True if the scene shows what fencing promises: A's late write refused with its token and
/// B's, B's entry kept, while the unfenced copy took A's late write.
fn fencing_held(scene: &FencingScene) -> bool {
    let refused = matches!(
        scene.a_late_write,
        Err(distlock::Error::Fenced { token, seen, .. })
            if token == scene.a_token && seen == scene.b_token
    );
    refused
        && scene.b_token > scene.a_token
        && scene.stored == ("entry 2 by B".to_owned(), scene.b_token)
        && scene.plain == "entry 2 by A"
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
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // The server the demo talks to, as it names itself (not the binary's name).
    let server_named = rt
        .block_on(server_version(&url))
        .unwrap_or_else(|e| format!("a server that did not answer INFO ({e})"));
    match &cluster {
        Some(cluster) => println!(
            "distlock demo: {WORKERS} processes x {TASKS} tasks x {ROUNDS} increments against a \
             Redis Cluster of 3 masters ({}: {server_named}); counters on {url}\n",
            cluster.urls().join(", ")
        ),
        None => println!(
            "distlock demo: {WORKERS} processes x {TASKS} tasks x {ROUNDS} increments against \
             {server_named} at {url}\n"
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

    // What the fencing tokens printed above are for.
    println!("\nFencing: a holder paused past its lease writes late, with its old token\n");
    let store_url = match &cluster {
        Some(cluster) => {
            let master = cluster.master_of_slot(distlock::hash_slot(LEDGER.as_bytes()));
            format!("redis://127.0.0.1:{master}/")
        }
        None => url.clone(),
    };
    let connect = || {
        let config = match &nodes {
            Some(nodes) => distlock::Config::cluster(nodes.split(',')),
            None => distlock::Config::new(url.clone()),
        };
        config.connect()
    };
    let fenced = match rt.block_on(fencing_scene(connect, &store_url)) {
        Ok(scene) => {
            println!(
                "\n{LEDGER_KEY} = \"{}\" (token {}): B's entry stands",
                scene.stored.0, scene.stored.1
            );
            println!(
                "the same late write as a plain SET: {LEDGER_PLAIN_KEY} = \"{}\", B's entry \
                 overwritten (no token: nothing to refuse it)",
                scene.plain
            );
            fencing_held(&scene)
        }
        Err(e) => {
            eprintln!("the fencing scene failed: {e}");
            false
        }
    };
    if !fenced {
        println!("fencing: WRONG (the late write was not refused as it should be)");
    }

    if !all_ok || locked != expected || !fenced {
        // `exit` skips destructors: stop the servers by PID first.
        drop((rt, server, cluster));
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fencing scene against a real Redis: A's late write is refused with its token and
    /// B's, B's entry stands, and the plain copy took A's late write (the scene shows both).
    #[test]
    fn the_paused_holders_late_write_is_refused() {
        let server = testkit::RedisServer::start();
        let url = server.url();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let connect = || distlock::Config::new(url.clone()).connect();
        let scene = runtime
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), fencing_scene(connect, &url)).await
            })
            .expect("the scene ends within 10 s")
            .unwrap();
        assert!(
            matches!(scene.a_late_write, Err(distlock::Error::Fenced { .. })),
            "{scene:?}"
        );
        assert!(fencing_held(&scene), "{scene:?}");
    }

    /// The check the demo's exit status rests on fails when the late write lands.
    #[test]
    fn a_late_write_that_lands_fails_the_check() {
        let scene = FencingScene {
            a_token: 1,
            b_token: 2,
            a_late_write: Ok(()),
            stored: ("entry 2 by B".to_owned(), 2),
            plain: "entry 2 by A".to_owned(),
        };
        assert!(!fencing_held(&scene));
    }

    /// The demo names the server it talks to as the server names itself: the version the
    /// binary it started reports (`redis-server --version`, or `REDIS_SERVER`'s: Valkey's too).
    #[test]
    fn names_the_server_it_talks_to() {
        let server = testkit::RedisServer::start();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let named = runtime.block_on(server_version(&server.url())).unwrap();
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let version = std::process::Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap();
        // `Redis server v=7.0.15 sha=…` / `Valkey server v=8.1.8 sha=…`
        let version = String::from_utf8(version.stdout).unwrap();
        let (product, rest) = version.split_once(" server v=").expect("a server version");
        let number = rest.split_whitespace().next().unwrap();
        assert_eq!(named, format!("{product} {number}"), "{version}");
    }

    #[test]
    fn reads_valkeys_own_version_before_its_compatible_redis_version() {
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";
        assert_eq!(server_name(valkey), "Valkey 8.1.8");
        assert_eq!(
            server_name("# Server\r\nredis_version:8.2.3\r\n"),
            "Redis 8.2.3"
        );
    }
}
