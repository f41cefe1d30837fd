//! The command connection, replaced when its reply stream can no longer be trusted.
//!
//! redis-rs matches replies to requests by order. If a reply goes missing on a connection that
//! stays open (a misbehaving proxy, a timeout while the server is frozen), every later reply
//! would be handed to the wrong request. Every script therefore echoes an id of its request,
//! and a mismatched echo retires the connection: the next call opens a fresh one. So does a
//! timeout, but only once a fresh connection shows that Redis itself answers (see
//! [`Connection::retire_if_redis_answers`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::FutureExt;

use crate::background::Background;
use crate::deploy::backend::{Backend, Link};
use crate::deploy::call_error::CallError;
use crate::error::is_error_reply;
use crate::sync;
use crate::wire::request::{echoes, Call, Sent};

/// The current command connection and its generation.
pub(crate) struct Connection {
    slot: RwLock<(u64, Link)>,
    backend: Arc<Backend>,
    /// A health check after a timeout is running (one at a time).
    probing: AtomicBool,
    /// The client's runtime: connections and reconnects live there.
    background: Background,
}

impl Connection {
    pub(crate) fn new(conn: Link, backend: Arc<Backend>, background: Background) -> Self {
        Connection {
            slot: RwLock::new((0, conn)),
            backend,
            probing: AtomicBool::new(false),
            background,
        }
    }

    /// The deployment this connection reaches (its master switches, its replicas).
    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// The client's runtime, where this connection is made and driven.
    pub(crate) fn background(&self) -> &Background {
        &self.background
    }

    /// The connection to use now, with its generation (to [`Connection::retire`] it).
    pub(crate) fn current(&self) -> (u64, Link) {
        let slot = sync::read(&self.slot);
        (slot.0, slot.1.clone())
    }

    /// Runs one script call, checking that its reply answers this request (the echoed request
    /// id) and decoding it; with the number of replicas that acknowledged its write when the
    /// call asked for a `WAIT` (whose timeout is added to `timeout`). A reply for another
    /// request or a reply of the wrong shape retires the connection; a timeout retires it if
    /// Redis answers a fresh connection.
    pub(crate) async fn call<C: Call>(
        self: &Arc<Self>,
        call: &C,
        timeout: Duration,
    ) -> Result<(C::Reply, Option<usize>), CallError> {
        let (generation, mut conn) = self.current();
        let request = call.request();
        let wait = call.replica_wait();
        let timeout = timeout.saturating_add(wait.map_or(Duration::ZERO, |w| w.timeout));
        // Polled on the caller's runtime: the driver lives wherever the connection was last
        // (re)made. If that runtime is gone, the call fails as a dropped connection and the
        // connection manager reconnects from the runtime that is asking (see `background`).
        let run = std::panic::AssertUnwindSafe(request.send::<C::Raw, _>(&mut conn, wait));
        let reply = match tokio::time::timeout(timeout, run.catch_unwind()).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_panic)) => return Err(self.abandoned(generation)),
            Err(_) => Err(()),
        };
        let sent = self.checked(generation, reply, call.request_id(), timeout)?;
        match call.decode(sent.raw) {
            Some(reply) => Ok((reply, sent.acked)),
            None => Err(self.out_of_step(generation)),
        }
    }

    /// A reply that answers another request (or has the wrong shape) came on generation
    /// `generation`: retires it, and says so.
    pub(crate) fn out_of_step(&self, generation: u64) -> CallError {
        self.retire(generation);
        CallError::Redis(desync_error())
    }

    /// A call whose connection panicked: redis-rs's connection manager shares one reconnect
    /// future among its callers, and its backoff timer belongs to the runtime that first polled
    /// it: once that runtime has shut down, polling it panics, and the shared future stays
    /// poisoned. A fresh connection manager is the only way back.
    pub(crate) fn abandoned(&self, generation: u64) -> CallError {
        tracing::warn!(
            "the Redis connection's reconnect was left behind by a runtime that shut down; reconnecting"
        );
        self.retire(generation);
        CallError::Redis(abandoned_error())
    }

    /// A reply (`Err(())`: none within the timeout) checked to answer request `id` on
    /// connection generation `generation`: a reply for another request or of the wrong shape
    /// retires the connection; a timeout retires it if Redis answers a fresh connection.
    pub(crate) fn checked<R>(
        self: &Arc<Self>,
        generation: u64,
        reply: Result<redis::RedisResult<Sent<R>>, ()>,
        id: &[u8],
        timeout: Duration,
    ) -> Result<Sent<R>, CallError> {
        match reply {
            Ok(Ok(sent)) if echoes(&sent.echoed, id) => Ok(sent),
            Ok(Ok(_)) => Err(self.out_of_step(generation)),
            Ok(Err(source)) if source.is_timeout() => {
                self.retire_if_redis_answers(generation, timeout);
                Err(CallError::Timeout)
            }
            Ok(Err(source)) if !source.is_io_error() && !is_error_reply(&source) => {
                // A reply of the wrong shape (say, a nil where the echo belongs): it answers
                // some other request, exactly like a mismatched echo.
                tracing::debug!(error = %source, "reply of the wrong shape");
                Err(self.out_of_step(generation))
            }
            Ok(Err(source)) => {
                // A Sentinel master that dropped us or was demoted: find the master again.
                if self.backend.replace_link_after(&source) {
                    self.retire(generation);
                }
                Err(CallError::Redis(source))
            }
            Err(()) => {
                self.retire_if_redis_answers(generation, timeout);
                Err(CallError::Timeout)
            }
        }
    }

    /// After a timeout: a timeout alone does not tell a lost reply from a frozen or overloaded
    /// Redis. Retiring the connection in the second case would send the cleanup of the
    /// timed-out command (the release of a possibly applied acquire) on a fresh connection,
    /// ahead of the command itself, which Redis still runs once it resumes: a lock held by
    /// nobody until its ttl. So the connection is retired only if a fresh connection gets a
    /// PING answered in time (Redis is fine, this connection is not); otherwise it is kept and
    /// commands keep running in the order they were sent.
    pub(crate) fn retire_if_redis_answers(self: &Arc<Self>, generation: u64, timeout: Duration) {
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        drop(self.background.handle().spawn(async move {
            let ping = async {
                let mut fresh = this.backend.fresh_link().await?;
                redis::cmd("PING").query_async::<String>(&mut fresh).await
            };
            if let Ok(Ok(_)) = tokio::time::timeout(timeout, ping).await {
                this.retire(generation);
            }
            this.probing.store(false, Ordering::Release);
        }));
    }

    /// Replaces generation `generation` with a fresh, lazily connecting one (no effect if it
    /// was replaced already). Requests still in flight on the old one finish or time out there.
    pub(crate) fn retire(&self, generation: u64) {
        let mut slot = sync::write(&self.slot);
        if slot.0 != generation {
            return;
        }
        match self.backend.lazy_command_link(&self.background) {
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

/// The error for a call whose connection panicked (see [`Connection::abandoned`]).
fn abandoned_error() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the Redis connection's reconnect was left behind by a tokio runtime that shut down; the connection was replaced",
    )
    .into()
}

/// The error for a reply that answers another request.
fn desync_error() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "a Redis reply did not match its request (a reply was lost); the connection was replaced",
    )
    .into()
}
