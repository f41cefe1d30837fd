//! The command connection, replaced when its reply stream can no longer be trusted.
//!
//! redis-rs matches replies to requests by order. If a reply goes missing on a connection that
//! stays open (a misbehaving proxy, a timeout while the server is frozen), every later reply
//! would be handed to the wrong request. Every script therefore echoes an id of its request,
//! and a timeout or a mismatched echo retires the connection: the next call opens a fresh one.

use std::sync::RwLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue};

use crate::scripts::Lua;

/// Why a script call failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No reply within the timeout (the connection was retired).
    Timeout,
    /// Redis or the connection failed (a mismatched reply is reported as an I/O error).
    Redis(redis::RedisError),
}

/// The current command connection and its generation.
pub(crate) struct Connection {
    slot: RwLock<(u64, ConnectionManager)>,
    redis: redis::Client,
    config: ConnectionManagerConfig,
}

impl Connection {
    pub(crate) fn new(
        conn: ConnectionManager,
        redis: redis::Client,
        config: ConnectionManagerConfig,
    ) -> Self {
        Connection {
            slot: RwLock::new((0, conn)),
            redis,
            config,
        }
    }

    /// The connection to use now, with its generation (to [`Connection::retire`] it).
    pub(crate) fn current(&self) -> (u64, ConnectionManager) {
        let slot = self.slot.read().unwrap_or_else(|e| e.into_inner());
        (slot.0, slot.1.clone())
    }

    /// Runs a script command whose reply is `{request id, value}`, checking that the reply
    /// answers this request (`echo`). A timeout, a reply for another request or a reply of the
    /// wrong shape retires the connection.
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        script: &Lua,
        cmd: &Cmd,
        echo: &str,
        timeout: Duration,
    ) -> Result<T, CallError> {
        let (generation, mut conn) = self.current();
        let reply = tokio::time::timeout(timeout, script.run::<(String, T)>(&mut conn, cmd)).await;
        match reply {
            Ok(Ok((echoed, value))) if echoed == echo => Ok(value),
            Ok(Ok(_)) => {
                self.retire(generation);
                Err(CallError::Redis(desync_error()))
            }
            Ok(Err(source)) if source.is_timeout() => {
                self.retire(generation);
                Err(CallError::Timeout)
            }
            Ok(Err(source)) => {
                if !source.is_io_error() && !matches!(source.kind(), redis::ErrorKind::Server(_)) {
                    // A reply of the wrong shape: it answers some other request.
                    self.retire(generation);
                }
                Err(CallError::Redis(source))
            }
            Err(_) => {
                self.retire(generation);
                Err(CallError::Timeout)
            }
        }
    }

    /// Replaces generation `generation` with a fresh, lazily connecting one (no effect if it
    /// was replaced already). Requests still in flight on the old one finish or time out there.
    pub(crate) fn retire(&self, generation: u64) {
        let mut slot = self.slot.write().unwrap_or_else(|e| e.into_inner());
        if slot.0 != generation {
            return;
        }
        match ConnectionManager::new_lazy_with_config(self.redis.clone(), self.config.clone()) {
            Ok(fresh) => {
                tracing::warn!(
                    generation,
                    "Redis reply stream out of step or timed out; reconnecting"
                );
                *slot = (generation + 1, fresh);
            }
            Err(error) => tracing::warn!(%error, "could not replace the Redis connection"),
        }
    }
}

/// The error for a reply that answers another request.
fn desync_error() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "a Redis reply did not match its request (a reply was lost); the connection was replaced",
    )
    .into()
}
