//! Fenced values in Redis: your own data, on any redis-rs connection (the lock's server or
//! another), written only by the newest holder of the lock that protects it.
//!
//! A fenced value is a hash at your key: `value` (your data), `token` (the fencing token that
//! wrote it) and `lock` (the name of that token's lock). The token lives in the value's key,
//! so it shares its hash slot (a Redis Cluster takes the script like any single-key command)
//! and its lifetime: memory is one hash per value, gone when the value expires or is
//! deleted. Read it with [`get`] (or `HGET key value`); write it only through [`set`] and
//! [`del`], each one script (`EVALSHA`) that compares and writes atomically.
//!
//! * [`set`] lands if no higher token of the same lock has written the key (the same token
//!   writes as often as it likes); like `SET`, it clears an expiry the key had.
//! * [`del`] removes the value but keeps its token as a *tombstone* for [`TOMBSTONE_TTL`], so a
//!   stale holder cannot write the value back meanwhile.
//! * A stale write fails with [`Error::Fenced`] and changes nothing; a key written under
//!   another lock, or holding something that is not a fenced value, with
//!   [`Error::FenceMismatch`]; Redis errors are [`Error::Store`].
//!
//! The connection is yours: any [`ConnectionLike`] of the redis-rs version distlock uses
//! (re-exported as `distlock::redis`): a `MultiplexedConnection`, a `ConnectionManager`, a
//! cluster connection.

use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{ErrorKind, FromRedisValue, RedisError, Script, ToSingleRedisArg, Value};

use crate::error::Error;
use crate::fence::Fence;
use crate::wire::scripts::FENCED_WRITE;

/// How long [`del`] keeps a deleted value's token (its tombstone): a holder paused longer than
/// this after the delete could write the value back. One day: far beyond any lease, and one
/// small hash per deleted value meanwhile.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A fenced value read by [`get`]: the value and the fence that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stored<V> {
    /// The value.
    pub value: V,
    /// The fencing token of the write that stored it.
    pub token: u64,
    /// The name of the lock whose token that was.
    pub lock: String,
}

/// The one script of [`set`] and [`del`], hashed once.
fn script() -> &'static Script {
    static SCRIPT: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(FENCED_WRITE))
}

/// Writes `value` at `key` if no higher token of `fence`'s lock has written it.
///
/// Fails with [`Error::Fenced`] (a newer holder has written `key`: nothing changed),
/// [`Error::FenceMismatch`] (`key` is fenced by another lock, or holds something that is not
/// a fenced value) or [`Error::Store`] (a Redis error).
pub async fn set<C, V>(conn: &mut C, key: &str, value: V, fence: &Fence) -> Result<(), Error>
where
    C: ConnectionLike,
    V: ToSingleRedisArg,
{
    write(conn, key, fence, "set", value).await.map(drop)
}

/// Deletes the value at `key` if no higher token of `fence`'s lock has written it, keeping
/// the token as a tombstone for [`TOMBSTONE_TTL`]. `Ok(true)` if there was a value.
///
/// Fails as [`set`] does.
pub async fn del<C>(conn: &mut C, key: &str, fence: &Fence) -> Result<bool, Error>
where
    C: ConnectionLike,
{
    let ttl = TOMBSTONE_TTL.as_millis() as u64;
    write(conn, key, fence, "del", ttl)
        .await
        .map(|had| had == 1)
}

/// One [`FENCED_WRITE`] of `key` (`op`: `set` with the value as `last`, or `del` with the
/// tombstone's lifetime), its refusals typed.
async fn write<C, A>(
    conn: &mut C,
    key: &str,
    fence: &Fence,
    op: &str,
    last: A,
) -> Result<i64, Error>
where
    C: ConnectionLike,
    A: ToSingleRedisArg,
{
    let mut call = script().prepare_invoke();
    call.key(key)
        .arg(op)
        .arg(fence.name())
        .arg(fence.token())
        .arg(last);
    let reply: Result<i64, RedisError> = call.invoke_async(conn).await;
    reply.map_err(|e| refused(e, key, fence))
}

/// The fenced value at `key` and the fence that wrote it; `None` when there is none (or only
/// a deleted value's tombstone). One `HMGET`.
///
/// Fails with [`Error::Store`] on a Redis error, when the value does not decode as `V`, or
/// when `key` holds something that is not a fenced value.
pub async fn get<V, C>(conn: &mut C, key: &str) -> Result<Option<Stored<V>>, Error>
where
    V: FromRedisValue,
    C: ConnectionLike,
{
    let read: Result<Vec<Value>, RedisError> = ::redis::cmd("HMGET")
        .arg(key)
        .arg(&["value", "token", "lock"])
        .query_async(conn)
        .await;
    let store = |source: RedisError| Error::Store {
        resource: key.to_owned(),
        source: Box::new(source),
    };
    let Ok::<[Value; 3], _>([value, token, lock]) = read.map_err(store)?.try_into() else {
        return Err(store(not_fenced()));
    };
    match (value, token, lock) {
        // Nothing, or a tombstone (deleted through `del`).
        (Value::Nil, _, _) => Ok(None),
        (value, token, lock) => {
            let (Ok(token), Ok(lock)) =
                (u64::from_redis_value(token), String::from_redis_value(lock))
            else {
                return Err(store(not_fenced()));
            };
            let value = V::from_redis_value(value).map_err(|e| store(e.into()))?;
            Ok(Some(Stored { value, token, lock }))
        }
    }
}

/// The error for a key that holds a hash that is not a fenced value.
fn not_fenced() -> RedisError {
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "not a fenced value (a hash of `value`, `token` and `lock` written by distlock::fence::redis)",
    ))
}

/// The script's refusals as typed errors; anything else is the store's.
fn refused(error: RedisError, key: &str, fence: &Fence) -> Error {
    let detail = error.detail().unwrap_or_default().to_owned();
    let resource = key.to_owned();
    let lock = fence.name().to_owned();
    match error.code() {
        Some("DISTLOCK_FENCED") => match detail.parse() {
            Ok(seen) => Error::Fenced {
                resource,
                token: fence.token(),
                seen,
            },
            Err(_) => Error::Store {
                resource,
                source: Box::new(error),
            },
        },
        Some("DISTLOCK_OTHER_LOCK") => Error::FenceMismatch {
            resource,
            lock,
            fenced_by: Some(detail),
        },
        Some("DISTLOCK_UNFENCED") | Some("WRONGTYPE") => Error::FenceMismatch {
            resource,
            lock,
            fenced_by: None,
        },
        _ => Error::Store {
            resource,
            source: Box::new(error),
        },
    }
}
