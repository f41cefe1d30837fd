//! Shared by the scenarios: run settings, a seeded RNG, Redis inspection helpers, and the
//! fenced resource that rejects stale writers.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use distlock::{Client, Config, Error, LockBuilder, LockGuard};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Run-wide settings from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `RELIABILITY_HEAVY=1`: more processes, iterations and rounds.
    pub(crate) heavy: bool,
    /// `RELIABILITY_SEED`, or one drawn from the clock (printed so a run can be replayed).
    pub(crate) seed: u64,
}

impl Settings {
    pub(crate) fn from_env() -> Self {
        let heavy = std::env::var("RELIABILITY_HEAVY").is_ok_and(|v| v == "1");
        let seed = std::env::var("RELIABILITY_SEED")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                splitmix(nanos ^ u64::from(std::process::id()))
            });
        Settings { heavy, seed }
    }

    /// `ci` normally, `heavy` with `RELIABILITY_HEAVY=1`.
    pub(crate) fn pick<T>(&self, ci: T, heavy: T) -> T {
        if self.heavy {
            heavy
        } else {
            ci
        }
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small deterministic RNG (SplitMix64): the same seed replays the same choices.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix(self.0)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent`/100.
    pub(crate) fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Uniform in `lo..=hi` milliseconds.
    pub(crate) fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    /// A child RNG for another task or process.
    pub(crate) fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}

/// The client configuration of fault scenarios: short timeouts so faults show quickly.
pub(crate) fn fast_config(url: &str) -> Config {
    Config::new(url)
        .response_timeout(Duration::from_millis(400))
        .connect_timeout(Duration::from_millis(400))
}

/// A client with the short timeouts of [`fast_config`].
pub(crate) async fn fast_client(url: &str) -> Client {
    fast_config(url)
        .connect()
        .await
        .expect("connect a distlock client")
}

/// A client with the default (2 s) timeouts, for scenarios that inject no Redis faults.
pub(crate) async fn calm_client(url: &str) -> Client {
    Config::new(url)
        .connect()
        .await
        .expect("connect a distlock client")
}

/// A Redis connection for a worker process (errors as text, for the worker's `Result`).
pub(crate) async fn redis_conn(url: &str) -> Result<MultiplexedConnection, String> {
    redis::Client::open(url)
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())
}

/// Takes `name` with a lease of `ttl` (no renewal, no waiting).
pub(crate) async fn acquire_for(
    client: &Client,
    name: impl Into<String>,
    ttl: Duration,
) -> Result<LockGuard, Error> {
    client.lock(name).ttl(ttl).acquire().await
}

/// Takes `name` with a lease of `ttl` that the client keeps renewing (no waiting).
pub(crate) async fn acquire_renewed(
    client: &Client,
    name: impl Into<String>,
    ttl: Duration,
) -> Result<LockGuard, Error> {
    client.lock(name).ttl(ttl).renew(true).acquire().await
}

/// Starts `lock.acquire()` on its own task, which returns the result and when it came.
pub(crate) fn spawn_acquire(lock: LockBuilder) -> JoinHandle<(Result<LockGuard, Error>, Instant)> {
    tokio::spawn(async move {
        let result = lock.acquire().await;
        (result, Instant::now())
    })
}

/// The lock hash of `name` under the default prefix.
pub(crate) fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// Lock hashes (not fence keys) present on the server.
pub(crate) async fn lock_hashes(conn: &mut MultiplexedConnection) -> Vec<String> {
    testkit::all_keys(conn)
        .await
        .into_iter()
        .filter(|k| k.starts_with("distlock:{") && k.ends_with('}'))
        .collect()
}

/// Waits until no lock hash is left (panics after `within`): cleanups and commands queued
/// during a fault may land late, and abandoned locks only go at their ttl.
pub(crate) async fn no_lock_left(conn: &MultiplexedConnection, within: Duration) -> Vec<String> {
    until_empty(conn, within, "no lock left", |mut conn| async move {
        lock_hashes(&mut conn).await
    })
    .await
}

/// Waits until `PUBSUB CHANNELS` is empty (panics after `within`): unsubscribes are
/// acknowledged asynchronously and Redis has no signal for "channel gone".
pub(crate) async fn no_channel_left(conn: &MultiplexedConnection, within: Duration) -> Vec<String> {
    until_empty(
        conn,
        within,
        "no subscription left",
        |mut conn| async move { pubsub_channels(&mut conn).await },
    )
    .await
}

/// Re-reads `list` until it comes back empty and returns it (panics after `within`).
async fn until_empty<F, Fut>(
    conn: &MultiplexedConnection,
    within: Duration,
    what: &str,
    list: F,
) -> Vec<String>
where
    F: Fn(MultiplexedConnection) -> Fut,
    Fut: Future<Output = Vec<String>>,
{
    testkit::eventually(within, what, || {
        let items = list(conn.clone());
        async move {
            let items = items.await;
            items.is_empty().then_some(items)
        }
    })
    .await
}

/// `PUBSUB CHANNELS` (every channel with a subscriber).
pub(crate) async fn pubsub_channels(conn: &mut MultiplexedConnection) -> Vec<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(conn)
        .await
        .expect("PUBSUB CHANNELS")
}

/// The lock hash as field/value pairs, sorted (empty when the lock is free).
pub(crate) async fn lock_state(
    conn: &mut MultiplexedConnection,
    name: &str,
) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = conn.hgetall(lock_key(name)).await.expect("HGETALL");
    fields.sort();
    fields
}

/// Number of fields of the lock hash: 2 fixed fields (owner, token) plus one per hold.
pub(crate) async fn lock_fields(conn: &mut MultiplexedConnection, name: &str) -> usize {
    conn.hlen(lock_key(name)).await.expect("HLEN")
}

/// Calls of `command` in `INFO commandstats`, retried while the server is still waking up.
pub(crate) async fn calls(conn: &mut MultiplexedConnection, command: &str) -> u64 {
    testkit::command_calls(conn, command).await
}

/// A resource that remembers the highest fencing token it accepted and refuses writes that
/// carry a smaller one ("write if token >= max seen"). Accepted writes are appended to a log.
pub(crate) struct FencedResource {
    max_key: String,
    log_key: String,
    script: redis::Script,
}

const FENCED_WRITE: &str = r#"
local max = tonumber(redis.call('GET', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if token < max then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
"#;

impl FencedResource {
    pub(crate) fn new(name: &str) -> Self {
        FencedResource {
            max_key: format!("resource:{name}:max-token"),
            log_key: format!("resource:{name}:log"),
            script: redis::Script::new(FENCED_WRITE),
        }
    }

    /// Writes `what` with `token`; true if the resource accepted it.
    pub(crate) async fn write(
        &self,
        conn: &mut MultiplexedConnection,
        token: u64,
        what: &str,
    ) -> bool {
        let accepted: i64 = self
            .script
            .key(&self.max_key)
            .key(&self.log_key)
            .arg(token.to_string())
            .arg(what)
            .invoke_async(conn)
            .await
            .expect("fenced write");
        accepted == 1
    }

    /// The accepted writes in order, as (token, what).
    pub(crate) async fn log(&self, conn: &mut MultiplexedConnection) -> Vec<(u64, String)> {
        let entries: Vec<String> = conn.lrange(&self.log_key, 0, -1).await.expect("LRANGE");
        entries
            .into_iter()
            .map(|e| {
                let (token, what) = e.split_once(' ').expect("log entry");
                (token.parse().expect("token"), what.to_owned())
            })
            .collect()
    }

    pub(crate) async fn max_token(&self, conn: &mut MultiplexedConnection) -> u64 {
        let max: Option<u64> = conn.get(&self.max_key).await.expect("GET");
        max.unwrap_or(0)
    }
}

/// Locks `m` even if a panicking holder poisoned it: the data are counters and buffers that a
/// panic cannot leave half-updated in a way that matters here.
pub(crate) fn lock_unpoisoned<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Milliseconds of a duration, for messages.
pub(crate) fn ms(d: Duration) -> u128 {
    d.as_millis()
}
