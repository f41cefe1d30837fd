//! The masters of a RedLock quorum (`Config::redlock`): one standalone backend and command
//! connection per master, joined into a [`Quorum`] that sends every call to all of them and
//! counts the replies by majority (the rules are `count`'s; the requests still out when a
//! call is decided are `stragglers`'; a fenced take's rounds over the masters' fence floors
//! are `token`'s).

pub(crate) mod count;
pub(crate) mod stragglers;
mod token;

pub(crate) use token::Taken;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use crate::background::Background;
use crate::config::Config;
use crate::deploy::backend::{Backend, Link};
use crate::deploy::call_error::CallError;
use crate::deploy::connection::Connection;
use crate::deploy::redlock::count::Quorate;
use crate::deploy::redlock::stragglers::{expiry, Expired, Fanout, Stragglers};
use crate::error::{is_connection_failure, is_permission_denied, Error};
use crate::wire::request::{ReplicaWait, Request, Sent};

/// A RedLock quorum: the masters, each with only what a master needs, and the requests still
/// out after their call settled.
pub(crate) struct Quorum {
    masters: Vec<Arc<Master>>,
    /// The requests still out after their call settled (see `stragglers`).
    stragglers: Arc<Stragglers>,
    /// The client's runtime, where the stragglers finish.
    background: Background,
}

/// One master of a quorum: its command connection and its health.
struct Master {
    conn: Arc<Connection>,
    /// Its last request failed (connection refused or dropped) or timed out; cleared by the
    /// next answer. See `Quorate::without_down`.
    down: AtomicBool,
}

/// The quorum over `config`'s masters. Each master's connection is made lazily (on first use,
/// and again after a master restarts), so a client starts while a minority of the masters is
/// down; each call bounds each master by the response timeout, and returns as soon as a
/// majority decided it (the rest finish in the background, see `stragglers`).
pub(crate) fn connect(config: &Config, background: &Background) -> Result<Quorum, Error> {
    let mut masters = Vec::with_capacity(config.redlock_masters.len());
    for url in &config.redlock_masters {
        let master = Config {
            url: url.clone(),
            redlock_masters: Vec::new(),
            ..config.clone()
        };
        let backend = Arc::new(Backend::open(&master)?);
        let link = backend
            .lazy_command_link(background)
            .map_err(|source| Error::Connect {
                to: master.target(),
                source,
            })?;
        masters.push(Arc::new(Master {
            conn: Arc::new(Connection::new(link, backend, background.clone())),
            down: AtomicBool::new(false),
        }));
    }
    Ok(Quorum {
        masters,
        stragglers: Arc::default(),
        background: background.clone(),
    })
}

impl Quorum {
    /// The number of masters.
    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    /// Each master's command connection.
    pub(crate) fn connections(&self) -> Vec<Arc<Connection>> {
        self.masters.iter().map(|m| m.conn.clone()).collect()
    }

    /// Each master's command connection and backend.
    pub(crate) fn masters(&self) -> Vec<(Link, Arc<Backend>)> {
        self.masters
            .iter()
            .map(|m| (m.conn.current().1, m.conn.backend().clone()))
            .collect()
    }

    /// Sends `call` to every master at once, each bounded by `timeout`; the replies count by
    /// majority (`Quorate::tally`). The call returns as soon as its outcome cannot change any
    /// more, so a slow or dead master does not hold up a decided
    /// majority: its request finishes in the background, and the next request for the same
    /// lock value to that master is sent after it (see `stragglers` for why that keeps
    /// releases and late grants safe). No replica acknowledgement is asked for.
    pub(crate) async fn call<C: Quorate>(
        &self,
        call: &C,
        timeout: Duration,
    ) -> Result<(C::Reply, Option<usize>), CallError> {
        let sent_at = tokio::time::Instant::now();
        let wait = call.replica_wait();
        let deadline = sent_at + timeout.saturating_add(wait.map_or(Duration::ZERO, |w| w.timeout));
        let nodes = self.masters.len();
        let value = call.ordered_by();
        let id: Arc<[u8]> = call.request_id().into();
        let (expire, expired) = expiry();
        let legs = self.masters.iter().enumerate().map(|(i, master)| {
            let after = value.and_then(|v| self.stragglers.before(i, v));
            let (request, id, expired) = (call.request(), id.clone(), expired.clone());
            let leg = master.leg::<C::Raw>(request, id, wait, after, expired, timeout);
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
            .masters
            .iter()
            .map(|m| m.down.load(Ordering::Acquire))
            .collect();
        // Masters whose request has not ended yet.
        let mut out = vec![true; nodes];
        // Masters that refused the client's user the call (an ACL), and the first refusal.
        let (mut denied, mut refusal) = (0, None);
        while let Some((i, reply)) = pending.next().await {
            out[i] = false;
            // A reply of the wrong shape answers another request: as on one connection.
            let reply = reply.and_then(|(generation, sent)| {
                call.decode(sent.raw)
                    .ok_or_else(|| self.masters[i].conn.out_of_step(generation))
            });
            match reply {
                Ok(reply) => {
                    replies.push(reply);
                    down[i] = false;
                }
                Err(CallError::Redis(error)) if is_permission_denied(&error) => {
                    denied += 1;
                    refusal.get_or_insert(error);
                }
                Err(error) => tracing::debug!(?error, "a RedLock master did not answer"),
            }
            if pending.is_done() {
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
            .map_err(|no| match refusal {
                // The masters that refused the user (an ACL) alone leave too few: no retry mends
                // that, so the refusal is the error (permanent, where `NoQuorum` is transient).
                Some(refused) if nodes - denied < no.required => CallError::Redis(refused),
                _ => CallError::NoQuorum {
                    agreed: no.agreed,
                    required: no.required,
                },
            })
    }
}

impl Master {
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
        after: Option<impl Future<Output = ()> + Send + 'static>,
        expired: Expired,
        timeout: Duration,
    ) -> impl Future<Output = Result<(u64, Sent<R>), CallError>> + Send + 'static {
        use futures_util::future::{select, Either};
        let master = self.clone();
        async move {
            if let Some(after) = after {
                // Bounded: each request it waits for ends by its own deadline, before this one's.
                after.await;
            }
            let node = &master.conn;
            let (generation, mut conn) = node.current();
            // Polled with the client's runtime current, wherever it runs: what redis-rs makes
            // for this master (connection drivers, the timers of a connect) lives there, not
            // on a caller's runtime that may be gone when a straggler polls it.
            let run = async move {
                let send = std::panic::AssertUnwindSafe(request.send::<R, _>(&mut conn, wait));
                send.catch_unwind().await
            };
            let mut run = Box::pin(node.background().enter(run));
            // `run` is polled first: even past the deadline, the request is queued in its turn.
            let reply = match select(&mut run, expired).await {
                Either::Left((Ok(reply), _)) => Ok(reply),
                Either::Left((Err(_panic), _)) => return Err(node.abandoned(generation)),
                Either::Right(_) => {
                    node.background().spawn(async move {
                        let _ = tokio::time::timeout(timeout, run).await;
                    });
                    Err(())
                }
            };
            let checked = node.checked(generation, reply, &id, timeout);
            // The master's health, for the next calls' `Quorate::without_down`.
            let down = match &checked {
                Ok(_) => Some(false),
                Err(CallError::Timeout) => Some(true),
                Err(CallError::Redis(e)) if is_connection_failure(e) => Some(true),
                Err(_) => None,
            };
            if let Some(down) = down {
                master.down.store(down, Ordering::Release);
            }
            checked.map(|sent| (generation, sent))
        }
    }
}
