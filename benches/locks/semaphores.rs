//! S1/S2's contenders for a semaphore's permit and a read hold:
//!
//! * floor: redis-rs sending distlock's own `ACQUIRE_PERMIT` (or `ACQUIRE_READ`) and `RELEASE`
//!   scripts by EVALSHA with precomputed keys, spinning on a full semaphore (as B3's floor spins
//!   on a held lock): what any library built on this protocol must pay at the least;
//! * Redisson-style: an expirable semaphore written here after the idea of Redisson's
//!   `RPermitExpirableSemaphore` (a counter of free permits next to a sorted set of permit ids
//!   scored by their expiry; taking a permit first returns the expired ones; a release
//!   publishes the free count, and waiters wait for that message, or the first expiry, on one
//!   subscription per client and name);
//! * distlock: `Client::semaphore(name, n)` (or `Client::lock(name).read()`), `acquire` +
//!   `release().await` (manual) or `run` (manual run).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, PushInfo, PushKind, Value};
use tokio::sync::Semaphore;

use crate::contenders::{load_script, BenchResult, Contenders, Hold, Kind, Recorder, Target, TTL};

/// How long a waiter may wait for a permit in S2 (never reached in practice).
const WAIT: Duration = Duration::from_secs(60);

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

/// The keys of a target's Redisson-style semaphore: free count, permit expiries, channel.
fn semaphore_keys(t: &Target) -> [String; 3] {
    let base = &t.redisson_lock;
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
    pub(crate) async fn connect(url: &str) -> BenchResult<RedissonSemaphore> {
        let conn = crate::contenders::connection(url).await?;
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
                    .set_response_timeout(Some(crate::contenders::RESPONSE_TIMEOUT))
                    .set_push_sender(pushes),
            )
            .await?;
        Ok(RedissonSemaphore {
            acquire_sha: load_script(&conn, SEMAPHORE_ACQUIRE).await?,
            release_sha: load_script(&conn, SEMAPHORE_RELEASE).await?,
            conn,
            subscriber,
            latches,
        })
    }

    /// One attempt: `None` when taken, else the ms until the first permit expires.
    async fn try_acquire(&self, t: &Target, permits: u32) -> BenchResult<Option<u64>> {
        let [free, expiries, channel] = semaphore_keys(t);
        let now = now_ms();
        let reply: i64 = redis::cmd("EVALSHA")
            .arg(&self.acquire_sha)
            .arg(3)
            .arg(free)
            .arg(expiries)
            .arg(channel)
            .arg(permits)
            .arg(&t.owner)
            .arg(now + TTL.as_millis() as u64)
            .arg(now)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok((reply >= 0).then_some(reply as u64))
    }

    async fn release(&self, t: &Target) -> BenchResult<()> {
        let [free, expiries, channel] = semaphore_keys(t);
        let code: i64 = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(3)
            .arg(free)
            .arg(expiries)
            .arg(channel)
            .arg(&t.owner)
            .arg(now_ms())
            .query_async(&mut self.conn.clone())
            .await?;
        if code < 0 {
            return Err("redisson-style semaphore: release found no permit".into());
        }
        Ok(())
    }

    /// The latch of `t`'s channel, subscribing on first use (the subscription stays).
    async fn latch(&self, t: &Target) -> BenchResult<Arc<Semaphore>> {
        let [_, _, channel] = semaphore_keys(t);
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

    /// Takes a permit, waiting as Redisson does: try; if none is free, wait for a release's
    /// message (or the first permit's expiry) and try again.
    async fn acquire_waiting(&self, t: &Target, permits: u32) -> BenchResult<()> {
        if self.try_acquire(t, permits).await?.is_none() {
            return Ok(());
        }
        let latch = self.latch(t).await?;
        let give_up = tokio::time::Instant::now() + WAIT;
        loop {
            // Subscribed now: a release from here on leaves a wake-up in the latch.
            let Some(first_expiry) = self.try_acquire(t, permits).await? else {
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

/// The floor's acquire of a permit or a read hold; true if taken.
async fn floor_try_acquire(c: &Contenders, t: &Target) -> BenchResult<bool> {
    let floor = &c.floor;
    let mut cmd = redis::cmd("EVALSHA");
    match t.hold {
        Hold::Permits(n) => cmd
            .arg(&floor.permit_sha)
            .arg(2)
            .arg(&t.lock)
            .arg(&t.fence)
            .arg(&t.owner)
            .arg(TTL.as_millis() as u64)
            .arg(n)
            .arg(0)
            .arg("r1"),
        Hold::Read => cmd
            .arg(&floor.read_sha)
            .arg(3)
            .arg(&t.lock)
            .arg(&t.fence)
            .arg(&t.writer)
            .arg(&t.owner)
            .arg(TTL.as_millis() as u64)
            .arg(0)
            .arg("r1"),
        Hold::Lock => return Err("the lock's floor is `Floor::try_acquire`".into()),
    };
    let (_, (status, _)): (String, (i64, i64)) = cmd.query_async(&mut floor.conn.clone()).await?;
    match status {
        1 => Ok(true),
        0 => Ok(false),
        other => Err(format!("floor: {:?} acquire answered status {other}", t.hold).into()),
    }
}

/// distlock's builder for `t`'s hold.
fn builder(c: &Contenders, t: &Target) -> distlock::LockBuilder {
    let b = match t.hold {
        Hold::Permits(n) => c.client.semaphore(t.name.as_str(), n),
        Hold::Read => c.client.lock(t.name.as_str()).read(),
        Hold::Lock => c.client.lock(t.name.as_str()),
    };
    b.ttl(TTL)
}

fn permits(t: &Target) -> BenchResult<u32> {
    match t.hold {
        Hold::Permits(n) => Ok(n),
        other => Err(format!("the Redisson-style semaphore has no {other:?} hold").into()),
    }
}

/// One uncontended acquire + release of `t`'s permit or read hold.
pub(crate) async fn cycle(c: &Contenders, kind: Kind, t: &Target) -> BenchResult<()> {
    match kind {
        Kind::Floor => {
            if !floor_try_acquire(c, t).await? {
                return Err("floor: permit unexpectedly busy".into());
            }
            c.floor.release(t).await
        }
        Kind::Redisson => {
            if c.semaphore.try_acquire(t, permits(t)?).await?.is_some() {
                return Err("redisson-style semaphore: unexpectedly full".into());
            }
            c.semaphore.release(t).await
        }
        Kind::Manual => {
            builder(c, t).acquire().await?.release().await?;
            Ok(())
        }
        Kind::ManualRun => Ok(builder(c, t).run(async {}).await?),
        other => Err(format!("{} has no permits or read holds", other.label()).into()),
    }
}

/// Waits for a permit (or read hold) of `t`, runs an empty critical section, releases.
pub(crate) async fn section(
    c: &Contenders,
    kind: Kind,
    t: &Target,
    rec: &Recorder<'_>,
) -> BenchResult<()> {
    match kind {
        Kind::Floor => {
            // No waiting logic in the floor: spin on the script.
            while !floor_try_acquire(c, t).await? {
                tokio::task::yield_now().await;
            }
            rec.enter();
            rec.leave();
            c.floor.release(t).await?;
        }
        Kind::Redisson => {
            c.semaphore.acquire_waiting(t, permits(t)?).await?;
            rec.enter();
            rec.leave();
            c.semaphore.release(t).await?;
        }
        Kind::Manual => {
            let guard = builder(c, t).wait(WAIT).acquire().await?;
            rec.enter();
            rec.leave();
            guard.release().await?;
        }
        Kind::ManualRun => {
            builder(c, t)
                .wait(WAIT)
                .run(async {
                    rec.enter();
                    rec.leave();
                })
                .await?;
        }
        other => return Err(format!("{} has no permits or read holds", other.label()).into()),
    }
    Ok(())
}
