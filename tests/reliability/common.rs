//! Shared by the scenarios: run settings, a seeded RNG, the acquire paths, Redis inspection
//! helpers for the `d2` key layout, and the fenced resource that rejects stale writers.

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

/// Which acquire path a lock takes (protocol `d2`): the plain `SET NX PX GET` pipeline, which
/// hands out no fencing token, or the fenced acquire script (`.fenced(true)`), which does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Plain,
    Fenced,
}

impl Kind {
    /// Both paths, plain first.
    pub(crate) const BOTH: [Kind; 2] = [Kind::Plain, Kind::Fenced];

    pub(crate) fn fenced(self) -> bool {
        self == Kind::Fenced
    }

    /// A short word for names and messages.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fenced => "fenced",
        }
    }

    /// Takes `name` this way with a lease of `ttl` (no renewal, no waiting).
    pub(crate) async fn acquire(
        self,
        client: &Client,
        name: impl Into<String>,
        ttl: Duration,
    ) -> Result<LockGuard, Error> {
        client
            .lock(name)
            .ttl(ttl)
            .fenced(self.fenced())
            .acquire()
            .await
    }
}

/// Takes `name` with a lease of `ttl` (no renewal, no waiting) through the plain acquire (no
/// fencing token).
pub(crate) async fn acquire_for(
    client: &Client,
    name: impl Into<String>,
    ttl: Duration,
) -> Result<LockGuard, Error> {
    Kind::Plain.acquire(client, name, ttl).await
}

/// Takes `name` with a lease of `ttl` and a fencing token (no renewal, no waiting).
pub(crate) async fn acquire_fenced(
    client: &Client,
    name: impl Into<String>,
    ttl: Duration,
) -> Result<LockGuard, Error> {
    Kind::Fenced.acquire(client, name, ttl).await
}

/// Takes `name` with a fencing token and a lease of `ttl` that the client keeps renewing (no
/// waiting). Fenced because the scenarios that hold renewed locks compare their tokens.
pub(crate) async fn acquire_renewed(
    client: &Client,
    name: impl Into<String>,
    ttl: Duration,
) -> Result<LockGuard, Error> {
    client
        .lock(name)
        .ttl(ttl)
        .renew(true)
        .fenced(true)
        .acquire()
        .await
}

/// The fencing token of a guard that was taken fenced (panics, naming `what`, if it has none).
pub(crate) fn token_of(guard: &LockGuard, what: &str) -> u64 {
    guard
        .token()
        .unwrap_or_else(|| panic!("{what}: a lock taken with fenced(true) has a fencing token"))
}

/// Starts `lock.acquire()` on its own task, which returns the result and when it came.
pub(crate) fn spawn_acquire(lock: LockBuilder) -> JoinHandle<(Result<LockGuard, Error>, Instant)> {
    tokio::spawn(async move {
        let result = lock.acquire().await;
        (result, Instant::now())
    })
}

/// The lock key of `name` under the default prefix: a string holding `d2:<owner>`, with the
/// lease as its expiry (protocol `d2`).
pub(crate) fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// The fence key of `name` under the default prefix: the last fencing token handed out for the
/// name (a decimal string), kept for the fence retention after the last fenced acquire.
pub(crate) fn fence_key(name: &str) -> String {
    format!("{}:fence", lock_key(name))
}

/// Lock keys (not fence keys) present on the server.
pub(crate) async fn lock_keys(conn: &mut MultiplexedConnection) -> Vec<String> {
    testkit::all_keys(conn)
        .await
        .into_iter()
        .filter(|k| k.starts_with("distlock:{") && k.ends_with('}'))
        .collect()
}

/// Waits until no lock key is left (panics after `within`): cleanups and commands queued
/// during a fault may land late, and abandoned locks only go at their ttl.
pub(crate) async fn no_lock_left(conn: &MultiplexedConnection, within: Duration) -> Vec<String> {
    until_empty(conn, within, "no lock left", |mut conn| async move {
        lock_keys(&mut conn).await
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

/// The value of the lock key (`d2:<owner>`; a mark its waiters added, `+`, taken off: the
/// owner is the same), `None` when the lock is free. Panics if the key is not a string (a lock
/// of another layout).
pub(crate) async fn lock_value(conn: &mut MultiplexedConnection, name: &str) -> Option<String> {
    let value: Option<String> = conn.get(lock_key(name)).await.expect("GET lock key");
    let mark = distlock::scripts::WAITERS_MARK;
    value.map(|v| {
        v.strip_suffix(mark)
            .map_or_else(|| v.clone(), str::to_owned)
    })
}

/// The last fencing token handed out for `name` (the fence key), `None` if there is none.
pub(crate) async fn fence_token(conn: &mut MultiplexedConnection, name: &str) -> Option<u64> {
    conn.get(fence_key(name)).await.expect("GET fence key")
}

/// What Redis holds for one lock (protocol `d2`): the lock key's value (its owner) and the fence
/// key (the last fencing token). The `d2` counterpart of the former lock hash's fields (owner,
/// token, holds): holds are counted on the client now, so owner and fence are all there is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockState {
    /// `d2:<owner>`, `None` when the lock is free.
    pub(crate) value: Option<String>,
    /// The fence key's content, `None` when no fenced acquire happened within the retention.
    pub(crate) fence: Option<String>,
}

/// The lock's value and fence key.
pub(crate) async fn lock_state(conn: &mut MultiplexedConnection, name: &str) -> LockState {
    let fence: Option<String> = conn.get(fence_key(name)).await.expect("GET fence key");
    LockState {
        value: lock_value(conn, name).await,
        fence,
    }
}

/// The owner tag of `client`: every lock value it writes is `<tag><n>` (`d2:<client id>:`,
/// then a counter). Learnt from a lock it takes (and releases) on `probe`.
pub(crate) async fn owner_tag(
    client: &Client,
    conn: &mut MultiplexedConnection,
    probe: &str,
) -> String {
    let guard = acquire_for(client, probe, Duration::from_secs(10))
        .await
        .expect("acquire the owner-tag probe");
    let value = lock_value(conn, probe)
        .await
        .expect("the owner-tag probe is held");
    guard.release().await.expect("release the owner-tag probe");
    let (tag, _) = value.rsplit_once(':').expect("a d2 value is <tag>:<n>");
    assert!(
        tag.starts_with(distlock::scripts::VERSION_TAG),
        "lock value {value:?} does not start with the protocol tag"
    );
    format!("{tag}:")
}

/// The guard agrees with Redis: the lock key holds a `d2` value (one written by the client whose
/// values start with `tag`, if given) with a lease as its expiry, and for a fenced guard the fence
/// key holds the guard's token (the last token handed out for the name). An unfenced guard has
/// no token.
pub(crate) async fn agrees_with_redis(
    conn: &mut MultiplexedConnection,
    name: &str,
    guard: &LockGuard,
    fenced: bool,
    tag: Option<&str>,
) -> Result<(), String> {
    let key = lock_key(name);
    let value: Option<String> = conn.get(&key).await.map_err(|e| e.to_string())?;
    let Some(value) = value else {
        return Err(format!("the guard holds {name} but Redis has no lock key"));
    };
    if !value.starts_with(distlock::scripts::VERSION_TAG) {
        return Err(format!("the lock key holds {value:?}, not a d2 lock"));
    }
    if let Some(tag) = tag {
        if !value.starts_with(tag) {
            return Err(format!(
                "the lock key holds {value:?}, a value of another owner than this client ({tag}...)"
            ));
        }
    }
    let pttl: i64 = conn.pttl(&key).await.map_err(|e| e.to_string())?;
    if pttl <= 0 {
        return Err(format!("the lock key has no lease (PTTL {pttl})"));
    }
    let fence = fence_token(conn, name).await;
    match (fenced, guard.token()) {
        (true, Some(token)) if fence == Some(token) => Ok(()),
        (true, Some(token)) => Err(format!(
            "guard token {token} but the fence key has {fence:?}"
        )),
        (true, None) => Err("a fenced guard without a token".to_owned()),
        (false, None) => Ok(()),
        (false, Some(token)) => Err(format!("an unfenced guard with token {token}")),
    }
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
