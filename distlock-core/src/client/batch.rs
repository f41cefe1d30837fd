//! Group commit on the hot path: plain acquires and releases that arrive while another one is in
//! flight on the command connection wait for it and then go out together, as one pipeline with
//! one `ECHO` (which still says whether the whole group's replies are its own) and one release
//! script call for all of the group's releases.
//!
//! A lone request is sent at once, by its caller, exactly as it would be without this module:
//! an uncontended lock pays nothing. Under load (many tasks of one client locking at the same
//! time) a group costs Redis one `ECHO` and one script call where each request would have
//! paid its own, and the client one round trip through redis-rs instead of one per request.
//!
//! At most two requests or groups are in flight at a time (two, so a waiter woken by a
//! release's notification sends its acquire while the release's reply is still on its way).
//! A group is sent by a task spawned for it (so a caller that is cancelled never strands the
//! others): on the caller's runtime if there is one, else on the client's own runtime thread.
//! Requests leave the queue in order, and a new request waits behind queued ones and behind a
//! group that is being handed to redis-rs: an acquire whose caller gives up (cancelled or timed
//! out) before its group is sent is left out of it, and its cleanup (the release of a possibly
//! taken lock) always reaches Redis after the request it cleans up. A release is sent even if
//! its caller stopped waiting for it (it may be the cleanup of a lock that is held).
//!
//! A group's sender outlives the members' callers, so a member's request may still be on its
//! way into redis-rs (a full send queue, a connection being made) after its caller left and
//! queued the cleanup: "handed to redis-rs" is not observable from here. So every later
//! request of an owner whose acquire is in a group not answered yet waits for that group's
//! answer (or its end): the cleanup of an acquire never overtakes it, whatever redis-rs does
//! with the order of its waiting senders. Sends are polled outside tokio's cooperative budget,
//! so a sender's first poll always queues its request in redis-rs.
//! Used for standalone Redis only (a cluster routes each key to its own node).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use redis::Value;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

use crate::deploy::connection::Connection;
use crate::deploy::CallError;
use crate::sync;
use crate::wire::calls::{
    add_acquire, decode_acquire, AcquireCall, Acquired, ReleaseCall, ReleaseItem, ReleaseManyCall,
    Released,
};
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;
use crate::wire::request::{finish_pipeline, Call, Request};

/// The most requests one group carries; the rest wait for the next group.
const MAX_GROUP: usize = 256;

/// Requests or groups in flight at once. Two, so that a waiter woken by a release's
/// notification sends its acquire at once, while the release's own reply is on its way (the
/// handoff stays under one round trip); more arrive together and go out grouped.
const MAX_IN_FLIGHT: usize = 2;

/// The group commit of one client's command connection.
pub(crate) struct Batcher {
    conn: Arc<Connection>,
    state: Mutex<State>,
    /// The client's own runtime: groups are sent from there when no runtime is current.
    spare: Handle,
    timeout: Duration,
    /// Ids of groups (`g<hex n>`, unique within the client) and of the tasks sending them.
    next_id: AtomicU64,
    /// A group was answered (or dropped): requests waiting behind it may go.
    answered: Notify,
    /// Told each time queued releases are handed to redis-rs (see [`Batcher::behind_releases`]).
    releases_out: Notify,
}

#[derive(Default)]
struct State {
    /// Requests and groups in flight (at most [`MAX_IN_FLIGHT`]).
    in_flight: usize,
    /// A group has left the queue but is not yet in redis-rs's send queue (the id of the task
    /// sending it): a new request waits (a cancelled member's cleanup must reach Redis after
    /// the member's own request).
    building: Option<u64>,
    queue: Vec<Queued>,
    /// The owners whose acquire is in a group not answered yet, with the group's number: a
    /// later request of one of them waits for that answer (see the module docs).
    unanswered: Vec<(u64, ShortId)>,
    /// Releases sent without waiting whose owner is in `unanswered`: queued when it is not.
    deferred: Vec<(ReleaseItem, ReleaseReply)>,
    /// Releases ever queued, and how many of them are out of the queue: handed to redis-rs
    /// (or dropped with a client that is gone). Releases leave the queue in order, so the
    /// first `releases_out` queued are out; `building_releases` are in the group being handed.
    releases_queued: u64,
    releases_out: u64,
    building_releases: u64,
}

impl State {
    fn is_unanswered(&self, owner: &ShortId) -> bool {
        self.unanswered
            .iter()
            .any(|(_, o)| o.as_bytes() == owner.as_bytes())
    }
}

/// Where a queued request's reply goes: typed, so a member only ever gets its own kind.
type ReplyTo<T> = oneshot::Sender<Result<T, CallError>>;

/// A queued request, owning what it needs (its caller may be gone by the time it is sent).
enum Queued {
    Acquire(QueuedAcquire, ReplyTo<Acquired>),
    Release(ReleaseItem, ReleaseReply),
}

/// Where a release's answer goes: to a caller waiting for it, or (a release sent without
/// waiting, `run`'s) to a handler called in place by the group's sender.
enum ReleaseReply {
    Waiting(ReplyTo<Released>),
    Sent(OnAnswer),
}

/// The handler of a release sent without waiting: called once with its answer, in the task
/// that sent its group (keep it short). Dropped unanswered (the group's task was dropped with
/// its runtime), it is called with a dropped-connection error: whether the release ran is
/// unknown.
pub(crate) struct OnAnswer(Option<Handler>);

/// What an [`OnAnswer`] calls.
type Handler = Box<dyn FnOnce(Result<Released, CallError>) + Send>;

impl OnAnswer {
    pub(crate) fn new(f: impl FnOnce(Result<Released, CallError>) + Send + 'static) -> Self {
        OnAnswer(Some(Box::new(f)))
    }

    fn answer(mut self, answer: Result<Released, CallError>) {
        if let Some(f) = self.0.take() {
            f(answer);
        }
    }
}

impl Drop for OnAnswer {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(CallError::Redis(dropped_group())));
        }
    }
}

impl ReleaseReply {
    fn answer(self, answer: Result<Released, CallError>) {
        match self {
            ReleaseReply::Waiting(reply) => {
                let _ = reply.send(answer);
            }
            ReleaseReply::Sent(handler) => handler.answer(answer),
        }
    }
}

impl Queued {
    /// Still to be sent: acquires whose callers gave up are left out (their cleanup is queued
    /// behind them); releases always go (one whose caller gave up waiting, Redis frozen say,
    /// is still the cleanup of a lock that may be held).
    fn wanted(&self) -> bool {
        match self {
            Queued::Acquire(_, reply) => !reply.is_closed(),
            Queued::Release(..) => true,
        }
    }
}

/// A plain acquire in a group.
struct QueuedAcquire {
    keys: LockKeys,
    owner: ShortId,
    ttl: Duration,
    want_pttl: bool,
}

/// Whether a caller sends its own request now or waits for its group.
enum Entry<T> {
    /// Nothing in flight: send it now; the turn ends when this is dropped.
    Turn(Turn),
    /// Queued: the group's reply comes here.
    Queued(oneshot::Receiver<Result<T, CallError>>),
}

impl Batcher {
    pub(crate) fn new(conn: Arc<Connection>, spare: Handle, timeout: Duration) -> Self {
        Batcher {
            conn,
            state: Mutex::new(State::default()),
            spare,
            timeout,
            next_id: AtomicU64::new(0),
            answered: Notify::new(),
            releases_out: Notify::new(),
        }
    }

    /// Waits until every release queued so far (by `run`, which does not wait for its answer)
    /// is handed to redis-rs, so that a request sent outside the group commit on the same
    /// connection (a permit's, a read hold's, a fenced or a `WAIT` acquire) reaches Redis after
    /// them: the same client taking a permit again right after `run` returns finds it free.
    /// Nothing queued: returns at once. Bounded by the response timeout: false if that ran
    /// out first.
    pub(crate) async fn behind_releases(&self) -> bool {
        let target = sync::lock(&self.state).releases_queued;
        let wait = async {
            loop {
                let out = self.releases_out.notified();
                let mut out = std::pin::pin!(out);
                out.as_mut().enable();
                if sync::lock(&self.state).releases_out >= target {
                    return;
                }
                out.await;
            }
        };
        if sync::lock(&self.state).releases_out < target {
            return tokio::time::timeout(self.timeout, wait).await.is_ok();
        }
        true
    }

    /// A plain acquire (no `WAIT`): alone if nothing is in flight, else in the next group.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        call: &AcquireCall<'_>,
    ) -> Result<Acquired, CallError> {
        debug_assert!(call.wait.is_none());
        let queued = |reply| {
            let acquire = QueuedAcquire {
                keys: call.keys.clone(),
                owner: *call.owner,
                ttl: call.ttl,
                want_pttl: call.want_pttl,
            };
            Queued::Acquire(acquire, reply)
        };
        self.submit(call, call.owner, queued).await
    }

    /// A release: alone if nothing is in flight, else in the next group.
    pub(crate) async fn release(
        self: &Arc<Self>,
        call: &ReleaseCall<'_>,
    ) -> Result<Released, CallError> {
        let queued = |reply| {
            let item = ReleaseItem::from(call);
            Queued::Release(item, ReleaseReply::Waiting(reply))
        };
        self.submit(call, call.owner, queued).await
    }

    /// A release queued now, whose caller does not wait for it (`run`): it goes out in the
    /// next group, ahead of every request queued after it, from a sender on the caller's
    /// runtime (started now if there is room in flight, as [`Batcher::enter`] does); the
    /// sender hands its answer to `on_answer`.
    pub(crate) fn queue_release(self: &Arc<Self>, call: &ReleaseCall<'_>, on_answer: OnAnswer) {
        let item = ReleaseItem::from(call);
        let mut state = sync::lock(&self.state);
        if state.is_unanswered(&item.value) {
            // Its acquire's group is not answered yet: queued when it is.
            state.deferred.push((item, ReleaseReply::Sent(on_answer)));
            return;
        }
        state
            .queue
            .push(Queued::Release(item, ReleaseReply::Sent(on_answer)));
        state.releases_queued += 1;
        if state.in_flight < MAX_IN_FLIGHT && state.building.is_none() {
            state.in_flight += 1;
            drop(state);
            self.spawn_groups(&self.current_or_spare());
        }
    }

    /// Sends `call` (of lock owner `owner`) alone (a turn), or queues the request `queued`
    /// makes (with where its reply goes) and waits for its group; first, if `owner`'s acquire
    /// is in a group not answered yet, waits for that answer.
    async fn submit<C: Call>(
        self: &Arc<Self>,
        call: &C,
        owner: &ShortId,
        queued: impl FnOnce(ReplyTo<C::Reply>) -> Queued,
    ) -> Result<C::Reply, CallError> {
        self.behind_own_group(owner).await;
        match self.enter(queued) {
            Entry::Turn(turn) => {
                let reply = tokio::task::unconstrained(self.conn.call(call, self.timeout)).await;
                drop(turn);
                reply.map(|(reply, _)| reply)
            }
            Entry::Queued(rx) => self.wait(rx).await,
        }
    }

    /// Takes a turn if there is room in flight and nobody is queued, else queues the request
    /// `op` makes (and starts a sender for the queue if there is room in flight).
    fn enter<T>(self: &Arc<Self>, queued: impl FnOnce(ReplyTo<T>) -> Queued) -> Entry<T> {
        let mut state = sync::lock(&self.state);
        let room = state.in_flight < MAX_IN_FLIGHT && state.building.is_none();
        if room && state.queue.is_empty() {
            state.in_flight += 1;
            return Entry::Turn(Turn(self.clone()));
        }
        let (reply, rx) = oneshot::channel();
        // Behind everything queued before it: a cancelled member's cleanup never overtakes it.
        let queued = queued(reply);
        if matches!(queued, Queued::Release(..)) {
            state.releases_queued += 1;
        }
        state.queue.push(queued);
        if room {
            state.in_flight += 1;
            drop(state);
            self.spawn_groups(&self.current_or_spare());
        }
        Entry::Queued(rx)
    }

    /// Returns once no group that is not answered yet holds an acquire of `owner`.
    async fn behind_own_group(&self, owner: &ShortId) {
        loop {
            let answered = self.answered.notified();
            let mut answered = std::pin::pin!(answered);
            answered.as_mut().enable();
            if !sync::lock(&self.state).is_unanswered(owner) {
                return;
            }
            answered.await;
        }
    }

    /// Group `group` was answered (or its sender dropped): its owners' later requests may go;
    /// releases deferred behind it are queued (and a sender started if there is room).
    fn group_answered(self: &Arc<Self>, group: u64) {
        let mut state = sync::lock(&self.state);
        state.unanswered.retain(|&(g, _)| g != group);
        let deferred = std::mem::take(&mut state.deferred);
        for (item, reply) in deferred {
            if state.is_unanswered(&item.value) {
                state.deferred.push((item, reply));
            } else {
                state.queue.push(Queued::Release(item, reply));
                state.releases_queued += 1;
            }
        }
        let start =
            !state.queue.is_empty() && state.in_flight < MAX_IN_FLIGHT && state.building.is_none();
        if start {
            state.in_flight += 1;
        }
        drop(state);
        self.answered.notify_waiters();
        if start {
            self.spawn_groups(&self.current_or_spare());
        }
    }

    /// The sender `sender` has handed its group to redis-rs (or is gone): new requests may go.
    fn built(&self, sender: u64) {
        let mut state = sync::lock(&self.state);
        if state.building == Some(sender) {
            state.building = None;
            state.releases_out += std::mem::take(&mut state.building_releases);
            drop(state);
            self.releases_out.notify_waiters();
        }
    }

    /// The caller's runtime, else the client's own.
    fn current_or_spare(&self) -> Handle {
        Handle::try_current().unwrap_or_else(|_| self.spare.clone())
    }

    /// A queued request's reply, within the response timeout (measured from the call, so the
    /// bound is the same as a lone request's).
    async fn wait<T>(&self, rx: oneshot::Receiver<Result<T, CallError>>) -> Result<T, CallError> {
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(outcome)) => outcome,
            // The group's task was dropped with its runtime: whether the request ran is
            // unknown, as after a dropped connection.
            Ok(Err(_)) => Err(CallError::Redis(dropped_group())),
            Err(_) => Err(CallError::Timeout),
        }
    }

    /// A turn ended: the queue (if any) goes out as the next group, from a task of its own that
    /// takes over the turn's place in flight.
    fn finish(self: &Arc<Self>) {
        let mut state = sync::lock(&self.state);
        if state.queue.is_empty() {
            state.in_flight -= 1;
            return;
        }
        drop(state);
        self.spawn_groups(&self.current_or_spare());
    }

    /// Sends groups until the queue is empty, from a task on `on`.
    fn spawn_groups(self: &Arc<Self>, on: &Handle) {
        // Made outside the task: a task that is dropped before it first runs (its runtime is
        // shutting down) still hands the sending on.
        let mut sending = Sending {
            batcher: self.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            on_spare: on.id() == self.spare.id(),
            done: false,
        };
        drop(on.spawn(async move {
            let this = sending.batcher.clone();
            loop {
                let group = {
                    let mut state = sync::lock(&this.state);
                    state.queue.retain(Queued::wanted);
                    if state.queue.is_empty() || state.building.is_some() {
                        // Nothing to send, or another sender is handing its group over: that
                        // one (or the turn after it) sends what is queued.
                        state.in_flight -= 1;
                        break;
                    }
                    state.building = Some(sending.id);
                    let n = state.queue.len().min(MAX_GROUP);
                    let group: Vec<_> = state.queue.drain(..n).collect();
                    state.building_releases = group
                        .iter()
                        .filter(|q| matches!(q, Queued::Release(..)))
                        .count() as u64;
                    // Numbered here, under the lock: its owners' later requests wait for it.
                    let number = this.next_id.fetch_add(1, Ordering::Relaxed);
                    for q in &group {
                        if let Queued::Acquire(a, _) = q {
                            state.unanswered.push((number, a.owner));
                        }
                    }
                    (number, group)
                };
                this.send_group(group, sending.id).await;
                // The members just answered run before the next group is taken: their next
                // requests (a release after an acquire) go in it, not a round trip later.
                tokio::task::yield_now().await;
            }
            sending.disarm();
        }));
    }

    /// Sends one group (taken from the queue by the sender `sender`) and hands each member its
    /// reply.
    async fn send_group(self: &Arc<Self>, (n, group): (u64, Vec<Queued>), sender: u64) {
        // However this ends (answered, failed, or dropped with its runtime), the owners of its
        // acquires may send again: from before its members hear their answers (a member that
        // took its lock may release it at once, and that release must not wait).
        let answered = GroupAnswered(self.clone(), n);
        let id = ShortId::with_counter("", b'g', n);
        let (mut acquires, mut acquire_replies) = (Vec::new(), Vec::new());
        let (mut releases, mut release_replies) = (Vec::new(), Vec::new());
        for q in group {
            match q {
                Queued::Acquire(acquire, reply) => {
                    acquires.push(acquire);
                    acquire_replies.push(reply);
                }
                Queued::Release(item, reply) => {
                    releases.push(item);
                    release_replies.push(reply);
                }
            }
        }
        let call = GroupCall {
            id: id.as_bytes(),
            releases: ReleaseManyCall {
                id: id.as_bytes(),
                items: &releases,
            },
            acquires: &acquires,
        };
        let (acquired, released) = {
            let sent = tokio::task::unconstrained(self.conn.call(&call, self.timeout));
            let mut sent = std::pin::pin!(sent);
            // The first poll puts the group in redis-rs's send queue (or among its waiting
            // senders, in order); only then may a new request go out alone (see
            // `State::building`).
            let first = std::future::poll_fn(|cx| Poll::Ready(sent.as_mut().poll(cx))).await;
            self.built(sender);
            match first {
                Poll::Ready(replies) => replies,
                Poll::Pending => sent.await,
            }
            .map_or_else(
                |error| (Err(error.clone()), Some(Err(error))),
                |(GroupReply { acquired, released }, _)| (Ok(acquired), released),
            )
        };
        // The release script was not loaded (Redis restarted or was flushed): the script call
        // loads it and runs the group's releases again.
        let released = match released {
            Some(released) => released,
            None => self
                .conn
                .call(&call.releases, self.timeout)
                .await
                .map(|(r, _)| r),
        };
        drop(answered);
        deliver(acquire_replies, acquired);
        match released {
            Ok(released) => {
                for (reply, found) in release_replies.into_iter().zip(released) {
                    reply.answer(Ok(found));
                }
            }
            Err(error) => {
                for reply in release_replies {
                    reply.answer(Err(error.clone()));
                }
            }
        }
    }
}

/// Hands each member of a group its own result (or the group's error).
fn deliver<T>(replies: Vec<ReplyTo<T>>, results: Result<Vec<T>, CallError>) {
    match results {
        Ok(results) => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(Ok(result));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

/// Ends a group's hold on its owners' later requests when dropped (see
/// [`Batcher::group_answered`]).
struct GroupAnswered(Arc<Batcher>, u64);

impl Drop for GroupAnswered {
    fn drop(&mut self) {
        self.0.group_answered(self.1);
    }
}

/// The turn of a request sent alone; dropping it (answered, failed or cancelled) ends it.
struct Turn(Arc<Batcher>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// A task sending groups; if it is dropped before the queue is empty (its runtime shut down),
/// the sending moves to the client's own runtime.
struct Sending {
    batcher: Arc<Batcher>,
    id: u64,
    on_spare: bool,
    done: bool,
}

impl Sending {
    /// The queue is empty and no longer ours: nothing to hand on.
    fn disarm(&mut self) {
        self.done = true;
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.batcher.built(self.id);
        if self.on_spare {
            // The client's own runtime is gone too (the client was dropped): nobody is left to
            // send; dropping the queue tells its members.
            let mut state = sync::lock(&self.batcher.state);
            state.queue.clear();
            state.releases_out = state.releases_queued;
            state.in_flight -= 1;
            drop(state);
            self.batcher.releases_out.notify_waiters();
            return;
        }
        let spare = self.batcher.spare.clone();
        self.batcher.spawn_groups(&spare);
    }
}

/// One group on the wire: its releases in one script call, then its acquires, then `ECHO`.
struct GroupCall<'a> {
    id: &'a [u8],
    releases: ReleaseManyCall<'a>,
    acquires: &'a [QueuedAcquire],
}

struct GroupReply {
    acquired: Vec<Acquired>,
    /// `None`: the release script must be loaded and run again.
    released: Option<Result<Vec<Released>, CallError>>,
}

impl Call for GroupCall<'_> {
    type Raw = Vec<Value>;
    type Reply = GroupReply;

    fn request(&self) -> Request {
        let mut pipe = redis::Pipeline::with_capacity(self.acquires.len() * 2 + 2);
        // Error replies stay in the reply: `WRONGTYPE` (not a lock of this protocol) and
        // `NOSCRIPT` are decoded.
        pipe.ignore_errors();
        if !self.releases.items.is_empty() {
            pipe.add_command(self.releases.command());
        }
        for a in self.acquires {
            add_acquire(&mut pipe, &a.keys, a.owner.as_bytes(), a.ttl, a.want_pttl);
        }
        finish_pipeline(pipe, None, self.id)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, raw: Vec<Value>) -> Option<GroupReply> {
        let mut raw = raw.into_iter();
        let released = if self.releases.items.is_empty() {
            Some(Ok(Vec::new()))
        } else {
            match raw.next()? {
                Value::ServerError(e) if e.code() == "NOSCRIPT" => None,
                reply => Some(Ok(self.releases.decode_reply(reply)?)),
            }
        };
        let acquired = self
            .acquires
            .iter()
            .map(|a| decode_acquire(&mut raw, a.owner.as_bytes(), a.want_pttl))
            .collect::<Option<Vec<_>>>()?;
        raw.next()
            .is_none()
            .then_some(GroupReply { acquired, released })
    }
}

/// The group's task is gone before it answered.
fn dropped_group() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the task sending a group of Redis requests was dropped before it was answered",
    )
    .into()
}
