//! The replies of a fenced store, typed: the script's refusals and a read fenced value.

use ::redis::{ErrorKind, FromRedisValue, RedisError, Value};

use crate::error::Error;
use crate::fence::Fence;

/// A fenced value read by `FencedStore::get`: the value and the fence that wrote it.
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

/// The script's refusals as typed errors; anything else is the store's. `key` is the key the
/// call wrote (a claim's: the watermark), `watermark` the watermark a write checked.
pub(super) fn refused(
    error: RedisError,
    key: &str,
    fence: &Fence,
    watermark: Option<&str>,
) -> Error {
    let detail = error.detail().unwrap_or_default().to_owned();
    let resource = key.to_owned();
    let lock = fence.name().to_owned();
    match (error.code(), watermark) {
        (Some("DISTLOCK_FENCED"), _) => match detail.parse() {
            Ok(seen) => Error::Fenced {
                resource,
                token: fence.token(),
                seen,
            },
            Err(_) => store(resource, error),
        },
        (Some("DISTLOCK_OTHER_LOCK"), _) => Error::FenceMismatch {
            resource,
            lock,
            fenced_by: Some(detail),
        },
        (Some("DISTLOCK_UNFENCED") | Some("WRONGTYPE"), _) => Error::FenceMismatch {
            resource,
            lock,
            fenced_by: None,
        },
        // The watermark holds something distlock did not write: the misuse is at its key.
        (Some("DISTLOCK_BAD_MARK"), _) => Error::FenceMismatch {
            resource: watermark.unwrap_or(key).to_owned(),
            lock,
            fenced_by: None,
        },
        (Some("CROSSSLOT"), Some(watermark)) => Error::FenceCrossSlot {
            resource,
            lock,
            watermark: watermark.to_owned(),
        },
        _ => store(resource, error),
    }
}

fn store(resource: String, source: RedisError) -> Error {
    Error::Store {
        resource,
        source: Box::new(source),
    }
}

/// The fenced value in an `HMGET key value token lock` reply.
pub(super) fn stored<V: FromRedisValue>(
    read: Result<Vec<Value>, RedisError>,
    key: &str,
) -> Result<Option<Stored<V>>, Error> {
    let store = |source: RedisError| store(key.to_owned(), source);
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
