//! The requests of a RedLock call (`Config::redlock`) still out when the call is settled: they
//! finish in the background, and a later request for the same lock value to the same master is
//! sent only after them.
//!
//! A quorum call returns as soon as its outcome is decided: a
//! master that is down or frozen no longer costs every acquire and release the response
//! timeout. The masters that have not answered yet are not forgotten. [`Fanout`] holds one
//! request per master (`Master::leg`: owned, so it can outlive the caller); dropped with
//! requests still out (the call settled early, or its caller gave up), it hands them to a task
//! on the client's runtime (`Background`, counted in `Client::background_tasks`), which runs
//! each to its end: answered, failed, or out of time at the call's deadline (one response
//! timeout after it was sent; a request out of time is kept one more timeout in a task of its
//! own so that redis-rs still writes it, see `Master::leg`). Nothing is left registered
//! after, and the tasks in flight grow with the call rate times that bound, never without
//! limit. Until a request ends, it is registered in [`Stragglers`] under its master and its
//! lock value, and the next request for that value to that master waits for it before it is
//! sent. The requests hold no timer (see [`expiry`]) and the masters' connections are made and
//! driven on the client's runtime, so nothing a straggler polls belongs to a caller's runtime
//! that may be gone.
//!
//! Why this is as safe as waiting for every master:
//!
//! * A **release** reaches every master as before: its requests were sent with the call and
//!   are awaited in the background instead of by the caller.
//! * A straggling **acquire** that grants the lock late grants it to the attempt's own lock
//!   value. Every acquisition ends with a release of that value: the holder's release (or the
//!   background release when its guard is dropped or its acquire cancelled), the release after
//!   an attempt without a majority (`acquire`, before the next attempt, which reuses the value),
//!   or the cleanup of a failed attempt (`ReleaseOnDrop`). That release is sent to the master
//!   only after the straggling acquire ended, so the master runs it after the late grant, which
//!   is freed. An acquire that ran out of time unanswered was queued on the connection before
//!   the release, so a frozen master that thaws runs the two in that order too; one that could
//!   not be sent (the master was down) grants nothing.
//! * A late grant never makes anyone believe they hold a lock: the outcome was decided by the
//!   majority that answered, with the validity counted from when the call was sent (a holder's
//!   lease starts then too), so a grant arriving later only adds one more master that refuses
//!   others until the holder's release or the grant's ttl. Settling early only shortens the
//!   elapsed time the validity check sees, never lengthens the lease.
//! * A **fenced** acquire's late grant raises that master's fence floor: floors only rise, so a
//!   later holder's token is at least as large as without it. The token of a fenced take is
//!   the largest of the majority that answered (not of every master); `deploy/redlock/token` puts it
//!   above every earlier holder's token all the same (its floor rounds reach a majority).
//!
//! The costs: a master that answers late keeps a late grant for one more round trip (its
//! release is sent once the grant's reply is in), busy for others meanwhile. And if a master's
//! connection is still being re-made when a request's time is up, the request behind it may be
//! written first once it is up: a grant missed that way expires at its ttl.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::{join_all, FutureExt, Shared};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

use crate::background::Background;
use crate::sync;

/// Resolves when a straggling request ended (its sender dropped).
type Ended = Shared<oneshot::Receiver<()>>;

/// Resolves when a call's requests are out of time (see [`expiry`]).
pub(crate) type Expired = Shared<oneshot::Receiver<()>>;

/// Says a call's requests are out of time when dropped (see [`expiry`]).
pub(crate) struct Expire {
    _expire: oneshot::Sender<()>,
}

/// The end of a call's time, shared by its requests: they hold no timer of their own (a timer
/// belongs to the runtime that made it and panics once that runtime is gone, and a straggler
/// outlives its caller's runtime). [`Fanout`] keeps the timer: on the caller's runtime while
/// the caller waits, then on the client's (`Background`), and drops the [`Expire`] when the
/// deadline passes.
pub(crate) fn expiry() -> (Expire, Expired) {
    let (expire, expired) = oneshot::channel();
    (Expire { _expire: expire }, expired.shared())
}

/// The straggling requests of a quorum, by lock value and master.
#[derive(Default)]
pub(crate) struct Stragglers {
    out: Mutex<HashMap<Box<[u8]>, Vec<Straggler>>>,
    next: AtomicU64,
}

struct Straggler {
    node: usize,
    seq: u64,
    ended: Ended,
}

impl Stragglers {
    /// What a request for lock value `value` to master `node` waits for before it is sent: the
    /// requests for the same value still out on that master (`None`: nothing).
    pub(crate) fn before(&self, node: usize, value: &[u8]) -> Option<impl Future<Output = ()>> {
        let out = sync::lock(&self.out);
        let ended: Vec<Ended> = out
            .get(value)?
            .iter()
            .filter(|s| s.node == node)
            .map(|s| s.ended.clone())
            .collect();
        (!ended.is_empty()).then(|| join_all(ended).map(drop))
    }

    /// Registers a request for `value` to master `node` as still out, until the returned
    /// [`Out`] is dropped.
    fn register(self: &Arc<Self>, node: usize, value: &[u8]) -> Out {
        let (done, ended) = oneshot::channel();
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        sync::lock(&self.out)
            .entry(value.into())
            .or_default()
            .push(Straggler {
                node,
                seq,
                ended: ended.shared(),
            });
        Out {
            stragglers: self.clone(),
            value: value.into(),
            seq,
            _done: done,
        }
    }

    /// Requests still out (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        sync::lock(&self.out).values().map(Vec::len).sum()
    }
}

/// A registered straggler; dropping it says the request ended.
struct Out {
    stragglers: Arc<Stragglers>,
    value: Box<[u8]>,
    seq: u64,
    /// Dropped with this: its receivers (the requests waiting behind) resolve.
    _done: oneshot::Sender<()>,
}

impl Drop for Out {
    fn drop(&mut self) {
        let mut out = sync::lock(&self.stragglers.out);
        if let Some(list) = out.get_mut(&self.value) {
            list.retain(|s| s.seq != self.seq);
            if list.is_empty() {
                out.remove(&self.value);
            }
        }
    }
}

/// One quorum call's requests, one per master, each yielding `(master index, outcome)`, and
/// the timer that ends their time. Dropped with requests still out, those finish in a
/// background task (see the module docs).
pub(crate) struct Fanout<F, T>
where
    F: Future<Output = (usize, T)> + Send + 'static,
    T: Send + 'static,
{
    pending: FuturesUnordered<F>,
    /// Per master: still out.
    out: Vec<bool>,
    /// The lock value whose requests must stay in order (`None`: no order needed).
    value: Option<Box<[u8]>>,
    deadline: Instant,
    /// Dropped at the deadline (`None` once it passed).
    expire: Option<Expire>,
    /// On the caller's runtime: made at the first [`Fanout::next`].
    timer: Option<Pin<Box<Sleep>>>,
    stragglers: Arc<Stragglers>,
    background: Background,
}

impl<F, T> Fanout<F, T>
where
    F: Future<Output = (usize, T)> + Send + 'static,
    T: Send + 'static,
{
    /// The requests `legs` (master `i`'s must yield `i`), already made with the [`Expired`]
    /// of `expire`, out of time at `deadline`; `value`: see [`Stragglers::before`].
    pub(crate) fn new(
        legs: impl IntoIterator<Item = F>,
        value: Option<&[u8]>,
        (deadline, expire): (Instant, Expire),
        stragglers: Arc<Stragglers>,
        background: Background,
    ) -> Self {
        let pending: FuturesUnordered<F> = legs.into_iter().collect();
        Fanout {
            out: vec![true; pending.len()],
            pending,
            value: value.map(Into::into),
            deadline,
            expire: Some(expire),
            timer: None,
            stragglers,
            background,
        }
    }

    /// The next request to end (`None`: all have).
    pub(crate) async fn next(&mut self) -> Option<(usize, T)> {
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        let ended = next_in_time(&mut self.pending, &mut self.expire, timer.as_mut()).await;
        if let Some(out) = ended.as_ref().and_then(|(i, _)| self.out.get_mut(*i)) {
            *out = false;
        }
        ended
    }

    /// True once every request ended.
    pub(crate) fn is_done(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The next of `pending` to end; drops `expire` once `timer` fired (the requests then end).
async fn next_in_time<F: Future>(
    pending: &mut FuturesUnordered<F>,
    expire: &mut Option<Expire>,
    mut timer: Pin<&mut Sleep>,
) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        if expire.is_some() && timer.as_mut().poll(cx).is_ready() {
            *expire = None;
        }
        pending.poll_next_unpin(cx)
    })
    .await
}

impl<F, T> Drop for Fanout<F, T>
where
    F: Future<Output = (usize, T)> + Send + 'static,
    T: Send + 'static,
{
    fn drop(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        // Registered now, before the caller can send anything else for this value.
        let mut outs: Vec<Option<Out>> = self
            .out
            .iter()
            .enumerate()
            .map(|(node, &out)| match (&self.value, out) {
                (Some(value), true) => Some(self.stragglers.register(node, value)),
                _ => None,
            })
            .collect();
        let (deadline, mut expire) = (self.deadline, self.expire.take());
        self.background.spawn(async move {
            // Made here, on the client's runtime.
            let mut timer = std::pin::pin!(tokio::time::sleep_until(deadline));
            while let Some((i, _)) = next_in_time(&mut pending, &mut expire, timer.as_mut()).await {
                // Ended: the requests queued behind it go.
                if let Some(out) = outs.get_mut(i) {
                    *out = None;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_waits_for_the_stragglers_of_its_value_on_its_master_only() {
        let stragglers = Arc::new(Stragglers::default());
        assert!(stragglers.before(0, b"v").is_none());
        let first = stragglers.register(0, b"v");
        let second = stragglers.register(0, b"v");
        let _other_master = stragglers.register(1, b"v");
        let _other_value = stragglers.register(0, b"w");
        assert_eq!(stragglers.len(), 4);
        let behind = stragglers.before(0, b"v").expect("two out on master 0");
        let mut behind = Box::pin(behind);
        drop(first);
        assert!((&mut behind).now_or_never().is_none(), "one still out");
        drop(second);
        assert!((&mut behind).now_or_never().is_some());
        assert!(stragglers.before(0, b"v").is_none());
        assert_eq!(stragglers.len(), 2);
    }

    #[tokio::test]
    async fn a_dropped_fanout_runs_its_requests_to_the_end_in_the_background() {
        let background = Background::start(std::time::Duration::from_secs(1)).unwrap();
        let stragglers = Arc::new(Stragglers::default());
        let (release, released) = oneshot::channel::<()>();
        let released = released.shared();
        let legs = (0..3).map(|i| {
            let gate = (i == 2).then(|| released.clone());
            async move {
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                (i, ())
            }
        });
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        let (expire, _expired) = expiry();
        let mut fanout = Fanout::new(
            legs,
            Some(b"v"),
            (deadline, expire),
            stragglers.clone(),
            background.clone(),
        );
        assert!(fanout.next().await.is_some());
        assert!(fanout.next().await.is_some());
        drop(fanout);
        assert_eq!(background.count(), 1, "the straggler runs on");
        assert!(stragglers.before(2, b"v").is_some());
        assert!(stragglers.before(0, b"v").is_none(), "master 0 answered");
        drop(release);
        let rest = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while background.count() > 0 || stragglers.len() > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        rest.await
            .expect("the straggler ended and left nothing registered");
    }
}
