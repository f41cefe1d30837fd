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
use crate::deploy::redlock::quorum::Quorate;
use crate::deploy::redlock::stragglers::{expiry, Expired, Fanout, Stragglers};
use crate::error::{is_connection_failure, is_error_reply};
use crate::sync;
use crate::wire::request::{echoes, Call, ReplicaWait, Request, Sent};

/// Why a script call failed.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// No reply within the timeout (the connection was retired).
    Timeout,
    /// Redis or the connection failed (a mismatched reply is reported as an I/O error).
    Redis(redis::RedisError),
    /// A RedLock quorum: too few masters agreed (see `quorum`).
    NoQuorum { agreed: usize, required: usize },
}

/// The current command connection and its generation.
pub(crate) struct Connection {
    slot: RwLock<(u64, Link)>,
    backend: Arc<Backend>,
    /// A health check after a timeout is running (one at a time).
    probing: AtomicBool,
    /// The client's runtime: connections and reconnects live there.
    background: Background,
    /// The masters of a RedLock quorum (empty: this connection is the one to use).
    nodes: Vec<Arc<Connection>>,
    /// A quorum's requests still out after their call settled (see `stragglers`).
    stragglers: Arc<Stragglers>,
    /// A quorum's master: its last request failed (connection refused or dropped) or timed
    /// out; cleared by the next answer. See `Quorate::without_down`.
    down: AtomicBool,
}

impl Connection {
    pub(crate) fn new(conn: Link, backend: Arc<Backend>, background: Background) -> Self {
        Connection {
            slot: RwLock::new((0, conn)),
            backend,
            probing: AtomicBool::new(false),
            background,
            nodes: Vec::new(),
            stragglers: Arc::default(),
            down: AtomicBool::new(false),
        }
    }

    /// A RedLock quorum over `nodes` (one connection per master, at least one): every call
    /// goes to all of them and counts by majority (see `quorum`).
    pub(crate) fn quorum(nodes: Vec<Arc<Connection>>) -> Self {
        let first = &nodes[0];
        Connection {
            slot: RwLock::new(first.current()),
            backend: first.backend.clone(),
            probing: AtomicBool::new(false),
            background: first.background.clone(),
            nodes,
            stragglers: Arc::default(),
            down: AtomicBool::new(false),
        }
    }

    /// Each master of a RedLock quorum: its command connection and its backend (none: not
    /// one).
    pub(crate) fn masters(&self) -> Vec<(Link, Arc<Backend>)> {
        self.nodes
            .iter()
            .map(|node| (node.current().1, node.backend.clone()))
            .collect()
    }

    /// The master switches seen so far (see `Backend::switches`).
    pub(crate) fn switches(&self) -> u64 {
        self.backend.switches()
    }

    /// `min_replicas` as the count to `WAIT` for (see `Backend::replicas_to_wait_for`).
    pub(crate) fn replicas_to_wait_for(&self, replicas: usize) -> usize {
        self.backend.replicas_to_wait_for(replicas)
    }

    /// Woken at every master switch; `None` where there are none (see `Backend::switches`).
    pub(crate) fn watch_switches(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.backend.watch_switches()
    }

    /// The number of masters of a RedLock quorum (0: not one).
    pub(crate) fn quorum_size(&self) -> usize {
        self.nodes.len()
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
    pub(crate) async fn call<C: Quorate>(
        self: &Arc<Self>,
        call: &C,
        timeout: Duration,
    ) -> Result<(C::Reply, Option<usize>), CallError> {
        if self.nodes.is_empty() {
            self.call_one(call, timeout).await
        } else {
            self.call_quorum(call, timeout).await
        }
    }

    /// [`Connection::call`] over a RedLock quorum: sent to every master at once, each bounded
    /// by `timeout`; the replies count by majority (`Quorate::tally`). The call returns as soon
    /// as its outcome cannot change any more (`Quorate::settles_early`), so a slow or dead
    /// master does not hold up a decided majority: its request finishes in the background, and
    /// the next request for the same lock value to that master is sent after it (see
    /// `stragglers` for why that keeps releases and late grants safe). No replica
    /// acknowledgement is asked for.
    async fn call_quorum<C: Quorate>(
        self: &Arc<Self>,
        call: &C,
        timeout: Duration,
    ) -> Result<(C::Reply, Option<usize>), CallError> {
        let sent_at = tokio::time::Instant::now();
        let wait = call.replica_wait();
        let deadline = sent_at + timeout.saturating_add(wait.map_or(Duration::ZERO, |w| w.timeout));
        let nodes = self.nodes.len();
        let value = call.ordered_by();
        let id: Arc<[u8]> = call.request_id().into();
        let (expire, expired) = expiry();
        let legs = self.nodes.iter().enumerate().map(|(i, node)| {
            let after = value.and_then(|v| self.stragglers.before(i, v));
            let (request, id, expired) = (call.request(), id.clone(), expired.clone());
            let leg = node.leg::<C::Raw>(request, id, wait, after, expired, timeout);
            async move { (i, leg.await) }
        });
        let mut pending = Fanout::new(
            legs,
            value,
            (deadline, expire),
            self.stragglers.clone(),
            self.background.clone(),
        );
        let mut replies: Vec<C::Reply> = Vec::with_capacity(nodes);
        let mut decided = None;
        let mut decided_early = None;
        // Masters known to be down when the call was sent, and not answered since.
        let mut down: Vec<bool> = self
            .nodes
            .iter()
            .map(|n| n.down.load(Ordering::Acquire))
            .collect();
        // Masters whose request has not ended yet.
        let mut out = vec![true; nodes];
        while let Some((i, reply)) = pending.next().await {
            out[i] = false;
            // A reply of the wrong shape answers another request: as in `call_one`.
            let reply = reply.and_then(|(generation, sent)| {
                call.decode(sent.raw).ok_or_else(|| {
                    self.nodes[i].retire(generation);
                    CallError::Redis(desync_error())
                })
            });
            match reply {
                Ok(reply) => {
                    replies.push(reply);
                    down[i] = false;
                }
                Err(error) => tracing::debug!(?error, "a RedLock master did not answer"),
            }
            if pending.is_done() || !call.settles_early() {
                continue;
            }
            // Counted with the masters still out as undecided: `Ok` means they cannot change it.
            let elapsed = sent_at.elapsed();
            if let Ok(reply) = call.tally(&replies, nodes, elapsed) {
                decided = Some(reply);
                break;
            }
            // Or with the masters known to be down counted as refusing (acquires, releases).
            // Only once every other master has answered: what they say may still decide it.
            let known_down = down.iter().filter(|&&d| d).count();
            let others_out = (0..nodes).any(|j| out[j] && !down[j]);
            if known_down > 0 && !others_out {
                if let Some(outcome) = call.without_down(&replies, nodes, known_down, elapsed) {
                    decided_early = Some(outcome);
                    break;
                }
            }
        }
        // The requests still out finish in the background.
        drop(pending);
        let reply = match (decided, decided_early) {
            (Some(reply), _) => Ok(reply),
            (None, Some(outcome)) => outcome,
            (None, None) => call.settle(&replies, nodes, sent_at.elapsed()),
        };
        reply
            .map(|reply| (reply, None))
            .map_err(|no| CallError::NoQuorum {
                agreed: no.agreed,
                required: no.required,
            })
    }

    /// This master's request of a quorum call, owning all it needs so that it can finish in
    /// the background once the call settled: sent when `after` (the requests for the same lock
    /// value still out on this master) resolved, its reply awaited until `expired` (the call's
    /// deadline, kept by its `Fanout`: no timer here, see `stragglers::expiry`). Out of time,
    /// the request is still kept (in a task of its own) until one more `timeout` has passed,
    /// because redis-rs does not write a queued request whose caller is gone: so what was
    /// queued in its turn reaches the master, before whatever is queued behind it. `timeout`
    /// also bounds the health check after a timeout. Yields the connection generation it was
    /// sent on, with the raw reply.
    fn leg<R: redis::FromRedisValue + Send + 'static>(
        self: &Arc<Self>,
        request: Request,
        id: Arc<[u8]>,
        wait: Option<ReplicaWait>,
        after: Option<impl std::future::Future<Output = ()> + Send + 'static>,
        expired: Expired,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<(u64, Sent<R>), CallError>> + Send + 'static {
        use futures_util::future::{select, Either};
        let node = self.clone();
        async move {
            if let Some(after) = after {
                // Bounded: each request it waits for ends by its own deadline, before this one's.
                after.await;
            }
            let (generation, mut conn) = node.current();
            // Polled with the client's runtime current, wherever it runs: what redis-rs makes
            // for this master (connection drivers, the timers of a connect) lives there, not
            // on a caller's runtime that may be gone when a straggler polls it.
            let run = async move {
                let send = std::panic::AssertUnwindSafe(request.send::<R, _>(&mut conn, wait));
                send.catch_unwind().await
            };
            let mut run = Box::pin(node.background.enter(run));
            // `run` is polled first: even past the deadline, the request is queued in its turn.
            let reply = match select(&mut run, expired).await {
                Either::Left((Ok(reply), _)) => Ok(reply),
                Either::Left((Err(_panic), _)) => return Err(node.abandoned(generation)),
                Either::Right(_) => {
                    node.background.spawn(async move {
                        let _ = tokio::time::timeout(timeout, run).await;
                    });
                    Err(())
                }
            };
            let checked = node.checked(generation, reply, &id, timeout);
            // The master's health, for the next calls' `Quorate::without_down`.
            match &checked {
                Ok(_) => node.down.store(false, Ordering::Release),
                Err(CallError::Timeout) => node.down.store(true, Ordering::Release),
                Err(CallError::Redis(e)) if is_connection_failure(e) => {
                    node.down.store(true, Ordering::Release)
                }
                Err(_) => {}
            }
            checked.map(|sent| (generation, sent))
        }
    }

    /// [`Connection::call`] on this connection alone (the group commit of `batch`, which a
    /// quorum does not use).
    pub(crate) async fn call_one<C: Call>(
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
            None => {
                self.retire(generation);
                Err(CallError::Redis(desync_error()))
            }
        }
    }

    /// A call whose connection panicked: redis-rs's connection manager shares one reconnect
    /// future among its callers, and its backoff timer belongs to the runtime that first polled
    /// it: once that runtime has shut down, polling it panics, and the shared future stays
    /// poisoned. A fresh connection manager is the only way back.
    fn abandoned(&self, generation: u64) -> CallError {
        tracing::warn!(
            "the Redis connection's reconnect was left behind by a runtime that shut down; reconnecting"
        );
        self.retire(generation);
        CallError::Redis(abandoned_error())
    }

    /// A reply (`Err(())`: none within the timeout) checked to answer request `id` on
    /// connection generation `generation`: a reply for another request or of the wrong shape
    /// retires the connection; a timeout retires it if Redis answers a fresh connection.
    fn checked<R>(
        self: &Arc<Self>,
        generation: u64,
        reply: Result<redis::RedisResult<Sent<R>>, ()>,
        id: &[u8],
        timeout: Duration,
    ) -> Result<Sent<R>, CallError> {
        match reply {
            Ok(Ok(sent)) if echoes(&sent.echoed, id) => Ok(sent),
            Ok(Ok(_)) => {
                self.retire(generation);
                Err(CallError::Redis(desync_error()))
            }
            Ok(Err(source)) if source.is_timeout() => {
                self.retire_if_redis_answers(generation, timeout);
                Err(CallError::Timeout)
            }
            Ok(Err(source)) if !source.is_io_error() && !is_error_reply(&source) => {
                // A reply of the wrong shape (say, a nil where the echo belongs): it answers
                // some other request, exactly like a mismatched echo.
                tracing::debug!(error = %source, "reply of the wrong shape");
                self.retire(generation);
                Err(CallError::Redis(desync_error()))
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

/// The error for a call whose connection panicked (see [`Connection::call_one`]).
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
