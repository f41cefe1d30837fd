//! The Redisson-style expirable semaphore of S1/S2, written for the harness after the idea of
//! Redisson's `RPermitExpirableSemaphore` (our code): a counter of free permits next to a
//! sorted set of permit ids scored by their expiry (the client's clock); taking a permit first
//! returns the expired ones; a release publishes the free count, and waiters wait for that
//! message, or the first expiry, on one subscription per client and name. redis-rs alone: no
//! fencing, no type checks. `contenders` runs it (and S1/S2's floor and distlock rows).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, PushInfo, PushKind, Value};
use tokio::sync::Semaphore;

/// Any failure of the semaphore (as the harness's `BenchError`).
type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Take a permit (the Redisson idea, our code). KEYS: free count, permit expiries (sorted
/// set), channel. ARGV: permits `n` (sets the count if there is none yet, as Redisson's
/// `trySetPermits` does once), permit id, its expiry (client clock, ms), now (client clock,
/// ms). Expired permits are returned first (and the new free count published). Returns -1 when
/// taken, else the ms until the first permit expires (at least 1).
const SEMAPHORE_ACQUIRE: &str = r#"
local free = redis.call('GET', KEYS[1])
if not free then
  free = ARGV[1]
  redis.call('SET', KEYS[1], free)
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[4], 'LIMIT', 0, 16)
if #expired > 0 then
  redis.call('ZREM', KEYS[2], unpack(expired))
  free = redis.call('INCRBY', KEYS[1], #expired)
  redis.call('PUBLISH', KEYS[3], free)
end
if tonumber(free) > 0 then
  redis.call('DECR', KEYS[1])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  return -1
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return math.max(tonumber(first[2] or ARGV[4]) - tonumber(ARGV[4]), 1)
"#;

/// Return a permit. KEYS: free count, permit expiries, channel. ARGV: permit id, now (client
/// clock, ms). Returns -1 if the id holds no permit (returned already, or swept as expired), 0
/// if it had expired (returned all the same), 1 if it was live; publishes the free count.
const SEMAPHORE_RELEASE: &str = r#"
local at = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not at then
  return -1
end
redis.call('ZREM', KEYS[2], ARGV[1])
local free = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', KEYS[3], free)
if tonumber(at) <= tonumber(ARGV[2]) then
  return 0
end
return 1
"#;

/// The keys of the semaphore at `base`: free count, permit expiries, channel.
fn semaphore_keys(base: &str) -> [String; 3] {
    [
        format!("{base}:free"),
        format!("{base}:expiries"),
        format!("{base}:channel"),
    ]
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One "latch" per channel: a release's message adds as many wake-ups as it says permits are
/// free (capped so they do not pile up while nobody waits).
type Latches = Arc<Mutex<HashMap<String, Arc<Semaphore>>>>;

/// Most wake-ups a latch keeps for waiters to come.
const LATCH_CAP: usize = 8;

/// The Redisson-style expirable semaphore: redis-rs, the two scripts above, and one pub/sub
/// subscription per channel shared by every waiter of this client.
pub(crate) struct RedissonSemaphore {
    conn: ConnectionManager,
    acquire_sha: String,
    release_sha: String,
    /// RESP3 connection whose pushes (the releases' messages) feed `latches`.
    subscriber: MultiplexedConnection,
    latches: Latches,
}

impl RedissonSemaphore {
    /// The semaphore's client: `conn` for its scripts, a RESP3 subscriber to `url` (replies
    /// within `response_timeout`) for the releases' messages.
    pub(crate) async fn connect(
        conn: ConnectionManager,
        url: &str,
        response_timeout: Duration,
    ) -> Result<RedissonSemaphore, Failure> {
        let latches: Latches = Arc::default();
        let info = redis::Client::open(url)?.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let fed = latches.clone();
        let pushes = move |push: PushInfo| {
            wake(&fed, push);
            Ok::<(), std::convert::Infallible>(())
        };
        let subscriber = client
            .get_multiplexed_async_connection_with_config(
                &AsyncConnectionConfig::new()
                    .set_response_timeout(Some(response_timeout))
                    .set_push_sender(pushes),
            )
            .await?;
        let load = |source: &'static str| {
            let mut conn = conn.clone();
            async move {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(source)
                    .query_async(&mut conn)
                    .await?;
                Ok::<_, Failure>(sha)
            }
        };
        Ok(RedissonSemaphore {
            acquire_sha: load(SEMAPHORE_ACQUIRE).await?,
            release_sha: load(SEMAPHORE_RELEASE).await?,
            conn,
            subscriber,
            latches,
        })
    }

    /// One attempt to take a permit of the semaphore at `base` (of `permits`) as `id`, for
    /// `ttl`: `None` when taken, else the ms until the first permit expires.
    pub(crate) async fn try_acquire(
        &self,
        base: &str,
        id: &str,
        permits: u32,
        ttl: Duration,
    ) -> Result<Option<u64>, Failure> {
        let [free, expiries, channel] = semaphore_keys(base);
        let now = now_ms();
        let reply: i64 = redis::cmd("EVALSHA")
            .arg(&self.acquire_sha)
            .arg(3)
            .arg(free)
            .arg(expiries)
            .arg(channel)
            .arg(permits)
            .arg(id)
            .arg(now + ttl.as_millis() as u64)
            .arg(now)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok((reply >= 0).then_some(reply as u64))
    }

    /// Returns `id`'s permit of the semaphore at `base`.
    pub(crate) async fn release(&self, base: &str, id: &str) -> Result<(), Failure> {
        let [free, expiries, channel] = semaphore_keys(base);
        let code: i64 = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(3)
            .arg(free)
            .arg(expiries)
            .arg(channel)
            .arg(id)
            .arg(now_ms())
            .query_async(&mut self.conn.clone())
            .await?;
        if code < 0 {
            return Err("redisson-style semaphore: release found no permit".into());
        }
        Ok(())
    }

    /// The latch of the channel of the semaphore at `base`, subscribing on first use (the
    /// subscription stays).
    async fn latch(&self, base: &str) -> Result<Arc<Semaphore>, Failure> {
        let [_, _, channel] = semaphore_keys(base);
        let (latch, new) = {
            let mut latches = self.latches.lock().unwrap_or_else(|e| e.into_inner());
            match latches.get(&channel) {
                Some(l) => (l.clone(), false),
                None => {
                    let l = Arc::new(Semaphore::new(0));
                    latches.insert(channel.clone(), l.clone());
                    (l, true)
                }
            }
        };
        if new {
            self.subscriber.clone().subscribe(&channel).await?;
        }
        Ok(latch)
    }

    /// Takes a permit as [`RedissonSemaphore::try_acquire`] does, waiting as Redisson does (up
    /// to `wait`): try; if none is free, wait for a release's message (or the first permit's
    /// expiry) and try again.
    pub(crate) async fn acquire_waiting(
        &self,
        (base, id): (&str, &str),
        permits: u32,
        ttl: Duration,
        wait: Duration,
    ) -> Result<(), Failure> {
        if self.try_acquire(base, id, permits, ttl).await?.is_none() {
            return Ok(());
        }
        let latch = self.latch(base).await?;
        let give_up = tokio::time::Instant::now() + wait;
        loop {
            // Subscribed now: a release from here on leaves a wake-up in the latch.
            let Some(first_expiry) = self.try_acquire(base, id, permits, ttl).await? else {
                return Ok(());
            };
            let left = give_up.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err("redisson-style semaphore: no permit within the wait".into());
            }
            let nap = left.min(Duration::from_millis(first_expiry));
            if let Ok(permit) = tokio::time::timeout(nap, latch.acquire()).await {
                permit?.forget();
            }
        }
    }
}

/// A release's message on a latch's channel: wake as many waiters as permits are free.
fn wake(latches: &Latches, push: PushInfo) {
    if push.kind != PushKind::Message {
        return;
    }
    let (Some(Value::BulkString(channel)), Some(Value::BulkString(free))) =
        (push.data.first(), push.data.get(1))
    else {
        return;
    };
    let channel = String::from_utf8_lossy(channel);
    let free: usize = std::str::from_utf8(free)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let latches = latches.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(latch) = latches.get(channel.as_ref()) {
        let add = free
            .min(LATCH_CAP)
            .saturating_sub(latch.available_permits());
        latch.add_permits(add);
    }
}
