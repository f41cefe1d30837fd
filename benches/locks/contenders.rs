//! The implementations under test, behind one enum so every scenario runs them the same way.
//!
//! * `floor`: redis-rs alone sending distlock's own requests with precomputed keys (the
//!   pipelined `SET NX PX GET` + `ECHO` acquire, the RELEASE script by EVALSHA): what any
//!   library built on this protocol must pay at the least.
//! * `manual` / `run` / `macro`: distlock through `Client::lock(..)` (`acquire` and
//!   `release().await`, which waits for the release's answer; `run`, which does not) and
//!   through `#[distributed_lock]` (which is `run`).
//! * peers: `rslock` and `async-redis-lock`, as published on crates.io.
//!
//! A target's [`Hold`] says what is taken: the lock (B1–B3), or a semaphore's permit or a read
//! hold (S1/S2). For those the floor sends `ACQUIRE_PERMIT` / `ACQUIRE_READ` and `RELEASE`
//! (spinning when busy, as for the lock), the Redisson-style contender is the expirable
//! semaphore of `semaphores`, and distlock is `Client::semaphore` / `lock(..).read()`.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use distlock::distributed_lock;
use redis::aio::ConnectionManager;
use tokio::time::Instant;

use crate::semaphores::RedissonSemaphore;

/// Any failure inside the harness.
pub(crate) type BenchError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type BenchResult<T> = Result<T, BenchError>;

/// Lease used by every contender in B1–B3 (long enough never to expire mid-run).
pub(crate) const TTL: Duration = Duration::from_secs(10);
/// How long a contender may wait for a busy lock in B3 (never reached in practice).
const WAIT: Duration = Duration::from_secs(60);
/// The peers poll a busy lock; their defaults (100–200 ms) would make B3 a measure of the
/// sleep. Polling about every millisecond is the most favourable setting for their handoff.
const RSLOCK_RETRY_DELAY: Duration = Duration::from_millis(2);
const ARL_RETRY: Duration = Duration::from_millis(1);

/// Which implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Not a lock: one PING per cycle, the round-trip baseline of B1.
    Ping,
    Floor,
    /// A Redisson-style lock written with redis-rs alone: one short hash script to take (or
    /// re-enter) and one to release; no waiting logic, no fencing.
    Redisson,
    /// `Client::lock(..).acquire()` and `LockGuard::release().await`: the release's answer
    /// waited for (two round trips uncontended, as every call did before issue 21).
    Manual,
    /// `Client::lock(..).run(..)`: the release sent, not waited for (issue 21).
    ManualRun,
    Macro,
    Rslock,
    AsyncRedisLock,
}

impl Kind {
    pub(crate) const ALL: [Kind; 7] = [
        Kind::Floor,
        Kind::Redisson,
        Kind::Manual,
        Kind::ManualRun,
        Kind::Macro,
        Kind::Rslock,
        Kind::AsyncRedisLock,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Ping => "PING (round-trip baseline)",
            Kind::Floor => "floor (raw d2 protocol)",
            Kind::Redisson => "Redisson-style floor (hash script)",
            Kind::Manual => "distlock manual",
            Kind::ManualRun => "distlock manual run",
            Kind::Macro => "distlock #[distributed_lock]",
            Kind::Rslock => "rslock 0.10",
            Kind::AsyncRedisLock => "async-redis-lock 0.4",
        }
    }

    /// Short form for key names and `BENCH_PROFILE`.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Kind::Ping => "ping",
            Kind::Floor => "floor",
            Kind::Redisson => "redisson",
            Kind::Manual => "manual",
            Kind::ManualRun => "run",
            Kind::Macro => "macro",
            Kind::Rslock => "rslock",
            Kind::AsyncRedisLock => "arl",
        }
    }

    /// The other lock implementations distlock is compared with (the Redisson-style floor is
    /// one: it is what a hash-based lock costs at the least).
    pub(crate) fn is_peer(self) -> bool {
        matches!(self, Kind::Redisson | Kind::Rslock | Kind::AsyncRedisLock)
    }
}

/// What one acquisition takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Hold {
    /// The lock (exclusive).
    Lock,
    /// One permit of a semaphore of this many.
    Permits(u32),
    /// A shared (read) hold of the lock.
    Read,
    /// The lock with a fencing token (distlock only: S3).
    Fenced,
    /// A set of two locks, the name and `<name>:2` (distlock only: S3).
    Set,
}

impl Hold {
    /// How many holders may be inside at once.
    pub(crate) fn capacity(self) -> u32 {
        match self {
            Hold::Lock | Hold::Fenced | Hold::Set => 1,
            Hold::Permits(n) => n,
            Hold::Read => u32::MAX,
        }
    }
}

/// One lock as each contender names it. distlock (and the floor) use the lock name
/// `bench:<id>`, so its keys are `distlock:{bench:<id>}`, `...:fence` and `...:released`.
pub(crate) struct Target {
    id: String,
    name: String,
    lock: String,
    /// The Redisson-style floor's hash key (another key: it is not a d2 lock); the
    /// Redisson-style semaphore's keys start with it too.
    redisson_lock: String,
    channel: String,
    /// The fence floor and a waiting writer's intent (`ACQUIRE_PERMIT`, `ACQUIRE_READ`).
    fence: String,
    writer: String,
    owner: String,
    /// What is taken (the lock unless [`Target::holding`] says otherwise).
    hold: Hold,
}

impl Target {
    /// Lock number `index` of a scenario, taken by task `task` (the floor's owner id).
    pub(crate) fn new(scenario: &str, kind: Kind, index: usize, task: usize) -> Self {
        let id = format!("{scenario}:{}:{index}", kind.tag());
        let name = format!("bench:{id}");
        let lock = format!("distlock:{{{name}}}");
        Target {
            channel: format!("{lock}:released"),
            fence: format!("{lock}:fence"),
            writer: format!("{lock}:writer"),
            redisson_lock: format!("{lock}:redisson"),
            owner: format!("{}floor-owner-{id}-{task}", distlock::scripts::VERSION_TAG),
            id,
            name,
            lock,
            hold: Hold::Lock,
        }
    }

    /// The same target, taking `hold` instead of the lock.
    pub(crate) fn holding(mut self, hold: Hold) -> Self {
        self.hold = hold;
        self
    }

    /// The lock name given to distlock (`bench:<id>`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key holding the lock, for PTTL sampling.
    pub(crate) fn redis_key(&self, kind: Kind) -> &str {
        match kind {
            Kind::AsyncRedisLock | Kind::Rslock => &self.name,
            _ => &self.lock,
        }
    }
}

/// Records B3's (and S2's) critical sections: when each was entered, when its release
/// returned, by which task, and whether more than `capacity` (one for a lock, n for a
/// semaphore of n) were ever inside at once.
pub(crate) struct Handoffs {
    origin: Instant,
    capacity: u32,
    inside: AtomicU32,
    violations: AtomicU64,
    events: Mutex<Vec<Section>>,
}

#[derive(Clone, Copy)]
pub(crate) struct Section {
    pub(crate) task: u32,
    /// Nanoseconds since `origin` at which the acquire was called (0: not recorded).
    pub(crate) asked: u64,
    /// Nanoseconds since `origin` at which the acquire returned.
    pub(crate) entered: u64,
    /// Nanoseconds since `origin` at which the release returned (0: not yet).
    pub(crate) released: u64,
}

impl Handoffs {
    pub(crate) fn new(origin: Instant, capacity: u32) -> Self {
        Handoffs {
            origin,
            capacity,
            inside: AtomicU32::new(0),
            violations: AtomicU64::new(0),
            events: Mutex::new(Vec::with_capacity(1 << 16)),
        }
    }

    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    pub(crate) fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }

    pub(crate) fn into_sections(self) -> Vec<Section> {
        self.events.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

/// One task's handle on [`Handoffs`].
pub(crate) struct Recorder<'a> {
    log: &'a Handoffs,
    task: u32,
    slot: AtomicUsize,
    /// When the current section's acquire was called.
    asked: AtomicU64,
}

impl<'a> Recorder<'a> {
    pub(crate) fn new(log: &'a Handoffs, task: u32) -> Self {
        Recorder {
            log,
            task,
            slot: AtomicUsize::new(usize::MAX),
            asked: AtomicU64::new(0),
        }
    }

    /// Called right before the acquire of a section.
    pub(crate) fn ask(&self) {
        self.asked.store(self.log.now(), Ordering::Relaxed);
    }

    /// Called right after the lock is acquired.
    fn enter(&self) {
        let entered = self.log.now();
        if self.log.inside.fetch_add(1, Ordering::AcqRel) >= self.log.capacity {
            self.log.violations.fetch_add(1, Ordering::Relaxed);
        }
        let mut events = self.log.events.lock().unwrap_or_else(|e| e.into_inner());
        self.slot.store(events.len(), Ordering::Relaxed);
        events.push(Section {
            task: self.task,
            asked: self.asked.load(Ordering::Relaxed),
            entered,
            released: 0,
        });
    }

    /// Called right before the lock is released.
    fn leave(&self) {
        self.log.inside.fetch_sub(1, Ordering::AcqRel);
    }

    /// Called when the release returned.
    pub(crate) fn released(&self) {
        let released = self.log.now();
        let slot = self.slot.load(Ordering::Relaxed);
        let mut events = self.log.events.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(section) = events.get_mut(slot) {
            section.released = released;
        }
    }
}

/// redis-rs and the distlock protocol, nothing else.
struct Floor {
    conn: ConnectionManager,
    release_sha: String,
    /// `ACQUIRE_PERMIT` and `ACQUIRE_READ` (S1/S2).
    permit_sha: String,
    read_sha: String,
}

impl Floor {
    async fn connect(url: &str) -> BenchResult<Floor> {
        let conn = connection(url).await?;
        Ok(Floor {
            release_sha: load_script(&conn, distlock::scripts::RELEASE).await?,
            permit_sha: load_script(&conn, distlock::scripts::ACQUIRE_PERMIT).await?,
            read_sha: load_script(&conn, distlock::scripts::ACQUIRE_READ).await?,
            conn,
        })
    }

    /// One acquire: `SET NX PX GET` and `ECHO`, pipelined; true if taken.
    async fn try_acquire(&self, t: &Target) -> BenchResult<bool> {
        let (previous, _echo): (Option<String>, String) = redis::pipe()
            .cmd("SET")
            .arg(&t.lock)
            .arg(&t.owner)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .arg("GET")
            .cmd("ECHO")
            .arg("r1")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(previous.is_none_or(|v| v == t.owner))
    }

    /// One RELEASE (of a lock, a permit or a read hold). Replies are `{id, code}`: 0
    /// released, negative if not held.
    async fn release(&self, t: &Target) -> BenchResult<()> {
        let (_, code): (String, i64) = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(2)
            .arg(&t.lock)
            .arg(&t.channel)
            .arg(&t.owner)
            .arg("r2")
            .arg(0)
            .query_async(&mut self.conn.clone())
            .await?;
        if code < 0 {
            return Err("floor: release found the lock gone or taken".into());
        }
        Ok(())
    }
}

#[distributed_lock(key = "bench:<id>", ttl = "10s")]
async fn macro_cycle(id: &str) -> Result<(), distlock::Error> {
    Ok(())
}

#[distributed_lock(key = "bench:<id>", ttl = "10s", wait = "60s")]
async fn macro_section(id: &str, rec: &Recorder<'_>) -> Result<(), distlock::Error> {
    rec.enter();
    rec.leave();
    Ok(())
}

/// Take or re-enter (Redisson's idea, our code): a hash with one counter per owner; `nil` when
/// taken, else the holder's remaining ttl. KEYS: lock. ARGV: ttl ms, owner.
const REDISSON_ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
return redis.call('PTTL', KEYS[1])
"#;

/// Release one hold; the last one deletes the lock and publishes. KEYS: lock, channel.
/// ARGV: ttl ms, owner. Returns -1 if not ours, else the holds left.
const REDISSON_RELEASE: &str = r#"
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  return -1
end
local left = redis.call('HINCRBY', KEYS[1], ARGV[2], -1)
if left > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return left
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], '0')
return 0
"#;

/// The Redisson-style floor: redis-rs and the two hash scripts, nothing else.
struct Redisson {
    conn: ConnectionManager,
    acquire_sha: String,
    release_sha: String,
}

/// How long the hand-written contenders' connections wait for a reply: long, so that a stall
/// of the loaded machine is not mistaken for a failure (redis-rs's default is 500 ms).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A redis-rs connection of the floor and the Redisson-style contenders.
async fn connection(url: &str) -> BenchResult<ConnectionManager> {
    let config =
        redis::aio::ConnectionManagerConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
    Ok(ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?)
}

/// `SCRIPT LOAD`: the script's SHA1 for EVALSHA.
async fn load_script(conn: &ConnectionManager, source: &str) -> BenchResult<String> {
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(&mut conn.clone())
        .await?;
    Ok(sha)
}

impl Redisson {
    async fn connect(url: &str) -> BenchResult<Redisson> {
        let conn = connection(url).await?;
        let acquire_sha = load_script(&conn, REDISSON_ACQUIRE).await?;
        let release_sha = load_script(&conn, REDISSON_RELEASE).await?;
        Ok(Redisson {
            conn,
            acquire_sha,
            release_sha,
        })
    }

    async fn try_acquire(&self, t: &Target) -> BenchResult<bool> {
        let pttl: Option<i64> = redis::cmd("EVALSHA")
            .arg(&self.acquire_sha)
            .arg(1)
            .arg(&t.redisson_lock)
            .arg(TTL.as_millis() as u64)
            .arg(&t.owner)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(pttl.is_none())
    }

    async fn release(&self, t: &Target) -> BenchResult<()> {
        let left: i64 = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(2)
            .arg(&t.redisson_lock)
            .arg(&t.channel)
            .arg(TTL.as_millis() as u64)
            .arg(&t.owner)
            .query_async(&mut self.conn.clone())
            .await?;
        if left < 0 {
            return Err("redisson-style: release found the lock gone or taken".into());
        }
        Ok(())
    }
}

/// Every contender, connected to one server.
pub(crate) struct Contenders {
    floor: Floor,
    redisson: Redisson,
    /// The Redisson-style expirable semaphore (S1/S2).
    semaphore: RedissonSemaphore,
    client: distlock::Client,
    rslock: rslock::LockManager,
    arl: async_redis_lock::Locker,
    arl_options: async_redis_lock::Options,
    kinds: Vec<Kind>,
}

impl Contenders {
    /// Connects everything; installs the distlock default client (the attribute uses it).
    pub(crate) async fn connect(url: &str) -> BenchResult<Contenders> {
        let client = distlock::init(url).await?;
        let floor = Floor::connect(url).await?;
        let redisson = Redisson::connect(url).await?;
        let semaphore =
            RedissonSemaphore::connect(connection(url).await?, url, RESPONSE_TIMEOUT).await?;
        let mut rslock = rslock::LockManager::new(vec![url]);
        rslock.set_retry(3, RSLOCK_RETRY_DELAY);
        let arl = async_redis_lock::Locker::from_redis_url(url).await?;
        let arl_options = async_redis_lock::Options::new()
            .ttl(TTL)
            .retry(ARL_RETRY)
            .timeout(Some(WAIT));
        let kinds = Kind::ALL.to_vec();
        Ok(Contenders {
            floor,
            redisson,
            semaphore,
            client,
            rslock,
            arl,
            arl_options,
            kinds,
        })
    }

    /// The contenders that run (the macro only once it expands).
    pub(crate) fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    /// One uncontended acquire + release.
    pub(crate) async fn cycle(&self, kind: Kind, t: &Target) -> BenchResult<()> {
        if t.hold != Hold::Lock {
            return hold_cycle(self, kind, t).await;
        }
        match kind {
            Kind::Ping => Ok(redis::cmd("PING")
                .exec_async(&mut self.floor.conn.clone())
                .await?),
            Kind::Floor => {
                if !self.floor.try_acquire(t).await? {
                    return Err("floor: lock unexpectedly busy".into());
                }
                self.floor.release(t).await
            }
            Kind::Redisson => {
                if !self.redisson.try_acquire(t).await? {
                    return Err("redisson-style: lock unexpectedly busy".into());
                }
                self.redisson.release(t).await
            }
            Kind::Manual => {
                let guard = self.client.lock(t.name.as_str()).ttl(TTL).acquire().await?;
                guard.release().await?;
                Ok(())
            }
            Kind::ManualRun => Ok(self
                .client
                .lock(t.name.as_str())
                .ttl(TTL)
                .run(async {})
                .await?),
            Kind::Macro => Ok(macro_cycle(&t.id).await?),
            Kind::Rslock => {
                let guard = self.rslock.acquire(t.name.as_str(), TTL).await?;
                guard.release().await;
                Ok(())
            }
            Kind::AsyncRedisLock => {
                let lock = self
                    .arl
                    .acquire_with_options(&self.arl_options, t.name.as_str())
                    .await?;
                lock.release().await?;
                Ok(())
            }
        }
    }

    /// Waits for the (contended) lock, runs an empty critical section, releases.
    pub(crate) async fn section(
        &self,
        kind: Kind,
        t: &Target,
        rec: &Recorder<'_>,
    ) -> BenchResult<()> {
        if t.hold != Hold::Lock {
            hold_section(self, kind, t, rec).await?;
            rec.released();
            return Ok(());
        }
        match kind {
            Kind::Ping => return Err("PING has no critical section".into()),
            Kind::Floor => {
                // No waiting logic in the floor: spin on the script.
                while !self.floor.try_acquire(t).await? {
                    tokio::task::yield_now().await;
                }
                rec.enter();
                rec.leave();
                self.floor.release(t).await?;
            }
            Kind::Redisson => {
                // No waiting logic either (Redisson waits by pub/sub; this floor spins).
                while !self.redisson.try_acquire(t).await? {
                    tokio::task::yield_now().await;
                }
                rec.enter();
                rec.leave();
                self.redisson.release(t).await?;
            }
            Kind::Manual => {
                let guard = self
                    .client
                    .lock(t.name.as_str())
                    .ttl(TTL)
                    .wait(WAIT)
                    .acquire()
                    .await?;
                rec.enter();
                rec.leave();
                guard.release().await?;
            }
            Kind::ManualRun => {
                self.client
                    .lock(t.name.as_str())
                    .ttl(TTL)
                    .wait(WAIT)
                    .run(async {
                        rec.enter();
                        rec.leave();
                    })
                    .await?;
            }
            Kind::Macro => macro_section(&t.id, rec).await?,
            Kind::Rslock => {
                let guard = self.rslock.acquire(t.name.as_str(), TTL).await?;
                rec.enter();
                rec.leave();
                guard.release().await;
            }
            Kind::AsyncRedisLock => {
                let lock = self
                    .arl
                    .acquire_with_options(&self.arl_options, t.name.as_str())
                    .await?;
                rec.enter();
                rec.leave();
                lock.release().await?;
            }
        }
        rec.released();
        Ok(())
    }
}

/// The floor's acquire of a permit or a read hold (S1/S2); true if taken.
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
        Hold::Fenced | Hold::Set => return Err(format!("no floor for {:?}", t.hold).into()),
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
        Hold::Fenced => c.client.lock(t.name.as_str()).fenced(true),
        Hold::Set => c.client.lock_all([t.name.clone(), format!("{}:2", t.name)]),
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
async fn hold_cycle(c: &Contenders, kind: Kind, t: &Target) -> BenchResult<()> {
    match kind {
        Kind::Floor => {
            if !floor_try_acquire(c, t).await? {
                return Err("floor: permit unexpectedly busy".into());
            }
            c.floor.release(t).await
        }
        Kind::Redisson => {
            let (base, id) = (&t.redisson_lock, &t.owner);
            if (c.semaphore.try_acquire(base, id, permits(t)?, TTL).await?).is_some() {
                return Err("redisson-style semaphore: unexpectedly full".into());
            }
            c.semaphore.release(base, id).await
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
async fn hold_section(
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
            let (base, id) = (&t.redisson_lock, &t.owner);
            c.semaphore
                .acquire_waiting((base, id), permits(t)?, TTL, WAIT)
                .await?;
            rec.enter();
            rec.leave();
            c.semaphore.release(base, id).await?;
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
