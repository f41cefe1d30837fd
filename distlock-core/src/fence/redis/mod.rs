//! Fenced values in Redis: your own data, on any redis-rs connection (the lock's server or
//! another), written only by the newest holder of the lock that protects it.
//!
//! A [`FencedStore`] wraps your connection with what its writes need to know:
//!
//! ```no_run
//! # async fn connection() -> redis::aio::MultiplexedConnection { unimplemented!() }
//! # async fn demo(fence: distlock_core::Fence) -> Result<(), distlock_core::Error> {
//! use std::time::Duration;
//! use distlock_core::fence::redis::FencedStore;
//!
//! // A fence can still arrive an hour after its holder was superseded (a job message's
//! // redelivery window, the longest pause you plan for): keep what refuses it that long.
//! let mut store = FencedStore::new(connection().await, Duration::from_secs(3600));
//! store.claim(&fence).await?; // on taking the lock: older holders are refused from now on
//! store.set("balance:{account:7}", 100, &fence).await?;
//! let balance = store.get::<i64>("balance:{account:7}").await?;
//! # Ok(()) }
//! ```
//!
//! **Layout.** A fenced value is a hash at your key: `value` (your data), `token` (the fencing
//! token that wrote it) and `lock` (that token's lock name). Read it with
//! [`get`](FencedStore::get) (or `HGET key value`); write it only through
//! [`set`](FencedStore::set) and [`del`](FencedStore::del), each one script (`EVALSHA`) that
//! compares and writes atomically. Next to the values, each lock has a **watermark**: the
//! string key `distlock:{<lock name>}:watermark` (the prefix is
//! [`watermark_prefix`](FencedStore::watermark_prefix)), the highest token of the lock that
//! has written any of its keys, or [claimed](FencedStore::claim) them.
//!
//! * [`set`](FencedStore::set) lands if no higher token of the same lock has written this key
//!   or raised the lock's watermark (the same token writes as often as it likes); like `SET`,
//!   it clears an expiry the key had.
//! * [`del`](FencedStore::del) removes the value but keeps its token as a *tombstone*.
//! * [`claim`](FencedStore::claim) raises the watermark alone: a new holder (a new leader, with
//!   `Leadership::fence()`) calls it the moment it has the lock, and every older holder is
//!   refused on every key of the lock from then on, not only on keys the new holder writes.
//! * A stale write fails with [`Error::Fenced`] and changes nothing; a key written under
//!   another lock, or holding something that is not a fenced value, with
//!   [`Error::FenceMismatch`]; Redis errors are [`Error::Store`].
//!
//! **How long.** The watermark and a delete's tombstone are what refuse a stale fence, so they
//! must outlive every fence that can still arrive. You say how long that is, in
//! [`FencedStore::new`]: the longest time a write carrying a fence can arrive after a newer
//! holder of its lock has written or claimed in this store (a job queue's redelivery window,
//! the longest pause or retry of a holder). The watermark expires that long after the lock's
//! last fenced write or claim, a tombstone that long after its delete; `Duration::MAX` keeps
//! them for ever. Memory: one small string per lock, one small hash per deleted value.
//!
//! **Eviction.** An evicted watermark or tombstone lets a stale write land, silently. At its
//! first write a store reads the server's `maxmemory-policy` (`INFO memory`, which covers
//! every master of a Cluster; `CONFIG GET` when `INFO` is refused) and fails with
//! [`Error::FenceEviction`] unless it is `noeviction` (`volatile-*` evicts keys with an expiry,
//! `allkeys-*` any key), or when neither command is permitted;
//! [`allow_eviction`](FencedStore::allow_eviction) skips the check.
//!
//! **One rule everywhere: the lock's hash tag.** The script touches the key and the lock's
//! watermark, and a Redis Cluster runs a script only when its keys share a hash slot. The
//! watermark lies in the lock name's slot (its hash tag is `{<lock name>}`), so every key
//! written under lock `L` must carry the hash tag `{L}` (`balance:{account:7}` under the lock
//! `account:7`); any other key is refused with [`Error::FenceCrossSlot`], nothing written — on
//! one server and through Sentinel too (checked before anything is sent), so code that passes
//! its tests on one server behaves the same on a Cluster. Data of one lock spread over slots
//! needs [`per_key`](FencedStore::per_key): no watermark, each key fenced on its own (the
//! weaker promise: a deposed holder's write lands on a key no newer holder has written), the
//! same on every deployment.
//!
//! **One store for every deployment.** [`FencedStore::with_client`] writes on the servers a
//! [`Client`]'s locks live on, whatever its deployment (one server, the current Sentinel
//! master, every node of a Cluster, each write routed by its key's slot), through a
//! [`Connection`] of the client's: the same service code, with one store type,
//! `FencedStore<Connection>`, runs on one server in development and on a Cluster in
//! production, configured by the same [`Config`](crate::Config) as its locks.
//!
//! **The connection: redis-rs 1.x.** The connection is yours: any [`ConnectionLike`] of the
//! redis-rs distlock is built on, redis-rs 1.x (re-exported as `distlock::redis`, and here as
//! [`distlock_core::redis`](crate::redis)): a `MultiplexedConnection`, a `ConnectionManager`,
//! a cluster connection. Open it through the re-export, and it is always the right one:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use distlock_core::fence::redis::FencedStore;
//! use distlock_core::redis; // `distlock::redis` in an application
//!
//! let conn = redis::Client::open("redis://127.0.0.1:6379/")?
//!     .get_multiplexed_async_connection()
//!     .await?;
//! let store = FencedStore::new(conn, Duration::from_secs(3600));
//! # let _ = store; Ok(()) }
//! ```
//!
//! Depending on `redis = "1"` yourself works as well (Cargo builds one redis-rs for both). A
//! connection of redis 0.32 or earlier is another crate's type to the compiler, whatever its
//! name: `FencedStore::new` fails with E0277, "the trait bound `MultiplexedConnection:
//! ConnectionLike` is not satisfied", noting "there are multiple different versions of crate
//! `redis` in the dependency graph" (the repository's `tests/ui/fail/fenced_store_other_redis.rs`
//! pins that error). A store is [`Clone`] when its connection is; clones share the first-write
//! check.

mod connection;
mod eviction;
mod reply;

pub use connection::Connection;
pub use reply::Stored;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{FromRedisValue, RedisError, Script, ToSingleRedisArg, Value};
use tokio::sync::OnceCell;

use crate::client::Client;
use crate::error::Error;
use crate::fence::Fence;
use crate::wire::keys::{hash_slot, validate_prefix, LockKeys};
use crate::wire::scripts::FENCED_WRITE;

/// The watermark's key prefix unless [`FencedStore::watermark_prefix`] says otherwise: the
/// lock keys' default prefix, so a watermark on the lock's own server lies with its keys.
pub const DEFAULT_WATERMARK_PREFIX: &str = "distlock";

/// Fenced writes to your Redis data on one connection: per lock (the default) or per key,
/// keeping what refuses stale fences as long as you say they can arrive. See the
/// [module docs](self).
pub struct FencedStore<C> {
    conn: C,
    settings: Settings,
    /// The first write's check ([`FencedStore::first_write`]), shared by clones.
    checked: Arc<OnceCell<()>>,
}

/// A store's options.
#[derive(Debug, Clone)]
struct Settings {
    fences_arrive_within: Duration,
    watermark_prefix: Arc<str>,
    per_key: bool,
    allow_eviction: bool,
}

impl<C: Clone> Clone for FencedStore<C> {
    fn clone(&self) -> Self {
        FencedStore {
            conn: self.conn.clone(),
            settings: self.settings.clone(),
            checked: Arc::clone(&self.checked),
        }
    }
}

impl<C> fmt::Debug for FencedStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The script's op: what one call does.
#[derive(Clone, Copy)]
enum Op {
    Set,
    Del,
    Claim,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Set => "set",
            Op::Del => "del",
            Op::Claim => "claim",
        }
    }
}

/// The one script of every write, hashed once.
fn script() -> &'static Script {
    static SCRIPT: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(FENCED_WRITE))
}

/// The longest lifetime sent to Redis (about 146 million years, far from `PEXPIRE`'s
/// overflow); longer windows are kept as long.
const LONGEST_KEEP_MS: u128 = 1 << 62;

impl<C> FencedStore<C>
where
    C: ConnectionLike + Send,
{
    /// Fenced writes on `conn`, per lock, keeping each lock's watermark and each deleted
    /// value's tombstone `fences_arrive_within` after the last write that touched it: the
    /// longest time a write carrying a fence can arrive after a newer holder of its lock has
    /// written or claimed here (`Duration::MAX`: for ever). A zero window is refused at the
    /// first write ([`Error::InvalidConfig`]).
    ///
    /// `conn` is a connection of redis-rs 1.x, the re-exported `distlock::redis`: one of
    /// redis 0.x is refused at compile time (E0277: see "The connection" in the
    /// [module docs](self)).
    pub fn new(conn: C, fences_arrive_within: Duration) -> Self {
        FencedStore {
            conn,
            settings: Settings {
                fences_arrive_within,
                watermark_prefix: Arc::from(DEFAULT_WATERMARK_PREFIX),
                per_key: false,
                allow_eviction: false,
            },
            checked: Arc::new(OnceCell::new()),
        }
    }

    /// The prefix of the watermark keys, `<prefix>:{<lock name>}:watermark` (default
    /// [`DEFAULT_WATERMARK_PREFIX`]): 1 to 128 bytes without `{` or `}`, as a lock's key
    /// prefix (checked at the first write). Every store writing one lock's data must use one
    /// prefix.
    pub fn watermark_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.watermark_prefix = Arc::from(prefix.into());
        self.checked = Arc::new(OnceCell::new());
        self
    }

    /// Fence each key on its own, with no watermark: a write lands if no higher token of its
    /// lock has written *that key*. For data of one lock spread over the hash slots of a
    /// Redis Cluster. The weaker promise: a deposed holder's write lands on a key no newer
    /// holder has written, and [`claim`](FencedStore::claim) has nothing to raise.
    pub fn per_key(mut self) -> Self {
        self.settings.per_key = true;
        self
    }

    /// Skip the first write's check of the server's `maxmemory-policy`: you accept that an
    /// evicted watermark or tombstone lets a stale write land (or you checked the policy where
    /// `INFO` and `CONFIG GET` are refused).
    pub fn allow_eviction(mut self) -> Self {
        self.settings.allow_eviction = true;
        self.checked = Arc::new(OnceCell::new());
        self
    }

    /// The connection, for your other commands.
    pub fn connection(&mut self) -> &mut C {
        &mut self.conn
    }

    /// Raises `fence`'s lock's watermark to its token, writing no value: from now on every
    /// lower token of the lock is refused on every key of the lock in this store. Call it the
    /// moment you hold the lock (a new leader: with `Leadership::fence()`), so a deposed holder
    /// is refused before your first write. The same token may claim (and write) again.
    ///
    /// Fails with [`Error::Fenced`] (`resource`: the watermark key) when a higher token of the
    /// lock has written or claimed already: this holder has been superseded. Fails with
    /// [`Error::InvalidConfig`] on a [`per_key`](FencedStore::per_key) store, and as
    /// [`set`](FencedStore::set) does on a store that fails its first-write check.
    pub async fn claim(&mut self, fence: &Fence) -> Result<(), Error> {
        if self.settings.per_key {
            return Err(Error::InvalidConfig {
                reason: "`FencedStore::claim` raises its lock's watermark, and a per-key store (`FencedStore::per_key`) keeps none: a claim there would refuse nothing".to_owned(),
            });
        }
        let watermark = self.watermark(fence)?;
        self.write(Op::Claim, &watermark, fence, None::<u8>)
            .await
            .map(drop)
    }

    /// Writes `value` at `key` if no higher token of `fence`'s lock has written it or raised
    /// the lock's watermark (per key: written it). `key` carries the hash tag of `fence`'s
    /// lock (`balance:{account:7}` under the lock `account:7`), on every deployment, unless
    /// the store is [`per_key`](FencedStore::per_key).
    ///
    /// Fails with [`Error::Fenced`] (a newer holder has written or claimed: nothing changed),
    /// [`Error::FenceMismatch`] (`key` is fenced by another lock, or holds something that is
    /// not a fenced value), [`Error::FenceCrossSlot`] (`key` is outside the lock's hash slot:
    /// nothing sent), [`Error::Store`] (a Redis error); at the store's first write also with
    /// [`Error::FenceEviction`] or [`Error::InvalidConfig`] (see [`FencedStore::new`]).
    pub async fn set<V>(&mut self, key: &str, value: V, fence: &Fence) -> Result<(), Error>
    where
        V: ToSingleRedisArg,
    {
        self.write(Op::Set, key, fence, Some(value)).await.map(drop)
    }

    /// Deletes the value at `key` if no higher token of `fence`'s lock has written it or
    /// raised the lock's watermark, keeping the token as a tombstone for the store's window
    /// ([`FencedStore::new`]). `Ok(true)` if there was a value.
    ///
    /// Fails as [`set`](FencedStore::set) does.
    pub async fn del(&mut self, key: &str, fence: &Fence) -> Result<bool, Error> {
        self.write(Op::Del, key, fence, None::<u8>)
            .await
            .map(|had| had == 1)
    }

    /// The fenced value at `key` and the fence that wrote it; `None` when there is none (or only
    /// a deleted value's tombstone). One `HMGET`, no check: reading proves nothing about
    /// holding the lock.
    ///
    /// Fails with [`Error::Store`] on a Redis error, when the value does not decode as `V`, or
    /// when `key` holds something that is not a fenced value.
    pub async fn get<V: FromRedisValue>(&mut self, key: &str) -> Result<Option<Stored<V>>, Error> {
        let read: Result<Vec<Value>, RedisError> = ::redis::cmd("HMGET")
            .arg(key)
            .arg(&["value", "token", "lock"])
            .query_async(&mut self.conn)
            .await;
        reply::stored(read, key)
    }

    /// `fence`'s lock's watermark key, `<prefix>:{<lock name>}:watermark`: in the lock name's
    /// hash slot (a lock name holds no braces: `LockKeys` refuses them; nor does the prefix,
    /// checked here too, so that a brace in it is reported as the bad prefix it is rather than
    /// as a key outside the slot of the watermark it would make).
    fn watermark(&self, fence: &Fence) -> Result<String, Error> {
        validate_prefix(&self.settings.watermark_prefix)?;
        let keys = LockKeys::new(&self.settings.watermark_prefix, fence.name())?;
        Ok(format!("{}:watermark", keys.lock()))
    }

    /// One [`FENCED_WRITE`] of `key` (for a claim: the watermark), after the first write's
    /// check; its refusals typed.
    async fn write<V>(
        &mut self,
        op: Op,
        key: &str,
        fence: &Fence,
        value: Option<V>,
    ) -> Result<i64, Error>
    where
        V: ToSingleRedisArg,
    {
        let watermark = match (op, self.settings.per_key) {
            (Op::Claim, _) | (_, true) => None,
            _ => Some(self.watermark(fence)?),
        };
        // One rule on every deployment: what a Cluster refuses (`CROSSSLOT`) is refused here
        // too, before anything is sent.
        if let Some(watermark) = watermark.as_deref() {
            if hash_slot(key.as_bytes()) != hash_slot(watermark.as_bytes()) {
                return Err(Error::FenceCrossSlot {
                    resource: key.to_owned(),
                    lock: fence.name().to_owned(),
                    watermark: watermark.to_owned(),
                });
            }
        }
        self.first_write(key).await?;
        let mut call = script().prepare_invoke();
        call.key(key);
        if let Some(watermark) = &watermark {
            call.key(watermark);
        }
        call.arg(op.name())
            .arg(fence.name())
            .arg(fence.token())
            .arg(keep_ms(self.settings.fences_arrive_within));
        if let Some(value) = value {
            call.arg(value);
        }
        let reply: Result<i64, RedisError> = call.invoke_async(&mut self.conn).await;
        reply.map_err(|e| reply::refused(e, key, fence, watermark.as_deref()))
    }

    /// The store's settings checked and the server's eviction policy read, once per store
    /// (and its clones): a failed check is made again at the next write.
    async fn first_write(&mut self, resource: &str) -> Result<(), Error> {
        let checked = Arc::clone(&self.checked);
        let FencedStore { conn, settings, .. } = self;
        checked
            .get_or_try_init(|| check(conn, settings, resource))
            .await
            .map(drop)
    }
}

impl FencedStore<Connection> {
    /// Fenced writes on the servers `client`'s locks live on (one server, the current Sentinel
    /// master, every node of a Redis Cluster, routed by each key's slot), with the watermarks
    /// under the client's key prefix ([`Config::key_prefix`](crate::Config::key_prefix)), so
    /// they lie with the locks' keys: one store type for every deployment (see the
    /// [module docs](self)). `fences_arrive_within` as in [`FencedStore::new`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a client of a RedLock quorum: its masters are independent
    /// servers, none of them the store; give [`FencedStore::new`] a connection of your data's
    /// server.
    pub fn with_client(client: &Client, fences_arrive_within: Duration) -> Result<Self, Error> {
        let conn = Connection::of(client)?;
        let prefix = client.config().key_prefix.clone();
        Ok(FencedStore::new(conn, fences_arrive_within).watermark_prefix(prefix))
    }
}

/// What the first write checks: the window, the prefix and the eviction policy.
async fn check<C>(conn: &mut C, settings: &Settings, resource: &str) -> Result<(), Error>
where
    C: ConnectionLike + Send,
{
    if settings.fences_arrive_within.is_zero() {
        return Err(Error::InvalidConfig {
            reason: "`FencedStore::new`'s window (how long a fence can still arrive) is zero: watermarks and tombstones would expire at once and refuse nothing; give the longest time a write carrying a fence can arrive, or `Duration::MAX` for ever".to_owned(),
        });
    }
    validate_prefix(&settings.watermark_prefix)?;
    if settings.allow_eviction {
        return Ok(());
    }
    match eviction::policy(conn).await {
        Ok(Some(policy)) if policy == "noeviction" => Ok(()),
        Ok(policy) => Err(Error::FenceEviction { policy }),
        Err(source) => Err(Error::Store {
            resource: resource.to_owned(),
            source: Box::new(source),
        }),
    }
}

/// The script's lifetime argument: milliseconds (at least 1), `0` for ever.
fn keep_ms(window: Duration) -> u64 {
    if window == Duration::MAX {
        return 0;
    }
    window.as_millis().clamp(1, LONGEST_KEEP_MS) as u64
}
