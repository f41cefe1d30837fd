//! Concurrency checks of the client's waiting core (shuttle; `scripts/shuttle.sh`, built with
//! `--cfg shuttle`): the real `Interest` (turn, wakes, grant slot, place in the cohort), the
//! real cohort and the client's real `dispatch` of release messages, driven by tasks that take
//! the wait loop's steps in `lock::wait_loop`'s order against a server that keeps the scripts'
//! rules (`redis_side`), in thousands of interleavings chosen by PCT (up to three preemptions
//! placed at random) and at random, with waiters cancelled at any point where a real one can be
//! (an await: a request or reply on the wire, a wait) after a number of steps the checker picks.
//!
//! Seeded bugs each check catches (`sync::model::Mutant`, asserted in `*_mutants_are_caught`):
//! a cancelled waiter that keeps its turn, a waiter that retries without waiting for its turn,
//! a wait whose baseline is taken after the attempt (a lost wake-up), a grant that does not
//! wake its waiter, a carried waiter whose leaving overtakes its queuing, a failed release's
//! carried waiter not promoted (its fate left carried: the cohort counts it out twice), a
//! failed (or cancelled) release's carried waiter, gone meanwhile, left in the queue, a waiter
//! gone from the client with an attempt of its own out left in the queue. One
//! promotion survives them, and what it is for is why: without the promotion of the first
//! deferred waiter when the cohort's last queued one leaves without the lock, that waiter is
//! still served — the release that empties the queue publishes a plain wake, and it retries —
//! but only once the line is empty (or at its `HANDED_RECHECK`): the promotion keeps its place
//! in line among other clients' waiters, which one client here cannot show.
//!
//! No clock moves in these checks: no wait runs out, and no waiter looks again on a timer
//! (`HANDED_RECHECK`, the holder's pttl). So a waiter the protocol forgets is never served,
//! and the checker reports the execution as a deadlock: "never stranded" is checked as "every
//! waiter that is not cancelled takes the lock without a timer's help".
//!
//! * `turns`: the waiters that wake and retry (RedLock, sets over several slot groups) take
//!   turns in FIFO order, a release wakes the waiter registered before its message, and a
//!   waiter cancelled while it has the turn hands it on;
//! * `handoff`: the waiters a release hands the lock to (one server, Sentinel, a cluster),
//!   with the client's cohort: the lock is believed by one task at a time, and only by the
//!   lock's holder in the server; every waiter not cancelled takes it; a cancelled one (before
//!   or after its grant, at the head of the line, deferred in the client or carried by a
//!   release) leaves nothing behind: no entry in the queue, no lock handed to nobody, no
//!   count in the cohort.

mod handoff;
mod redis_side;
mod turns;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shuttle::future::{spawn, JoinHandle};
use tokio::time::Instant;

use self::redis_side::{in_flight, Server};
use crate::client::waiting::channel::Channel;
use crate::client::waiting::cohort::{self, Carry, Deferral};
use crate::client::waiting::subscription::Interest;
use crate::sync::{self, time, Mutex};
use crate::wire::ids::ShortId;

/// One client of one lock on one server, as the checks see it.
struct Ctx {
    server: Server,
    entry: Arc<Channel>,
    /// The client's subscriptions alive (`Waiters::has_waiters`).
    subscribed: Mutex<usize>,
    /// The task that believes it holds the lock now.
    belief: Mutex<Option<usize>>,
    /// Cleanups sent in the background (`Client::spawn_cleanup`), awaited at the end.
    cleanups: Mutex<Vec<JoinHandle<()>>>,
    /// The order in which tasks came to believe they hold the lock.
    held: Mutex<Vec<usize>>,
    ids: AtomicU64,
}

impl Ctx {
    /// The lock held by task 0.
    fn new() -> Arc<Self> {
        let entry = Arc::new(Channel::new(1));
        Arc::new(Ctx {
            server: Server::new(value(0).as_bytes(), entry.clone()),
            entry,
            subscribed: Mutex::new(0),
            belief: Mutex::new(None),
            cleanups: Mutex::new(Vec::new()),
            held: Mutex::new(Vec::new()),
            ids: AtomicU64::new(0),
        })
    }

    fn request_id(&self) -> ShortId {
        ShortId::with_counter("", b'r', self.ids.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn cleanup(self: &Arc<Self>, f: impl std::future::Future<Output = ()> + Send + 'static) {
        sync::lock(&self.cleanups).push(spawn(f));
    }

    /// Waits for every cleanup, then for every message published to be dispatched.
    async fn settle(&self) {
        loop {
            let next = sync::lock(&self.cleanups).pop();
            match next {
                Some(cleanup) => cleanup.await.expect("a cleanup"),
                None => break,
            }
        }
        self.server.close();
    }

    /// What the client holds when nothing is left to do: nothing.
    fn assert_at_rest(&self) {
        assert_eq!(self.server.holder(), None, "the lock held at the end");
        assert!(
            self.server.queued().is_empty(),
            "entries left in the queue: {:?}",
            self.server.queued()
        );
        assert_eq!(
            cohort::counted(&self.entry.cohort),
            0,
            "cohort still counts"
        );
        assert_eq!(
            cohort::deferred(&self.entry.cohort),
            0,
            "cohort still defers"
        );
        assert!(
            sync::lock(&self.entry.grants).is_empty(),
            "grant slots left"
        );
        assert_eq!(
            self.entry.turn.available_permits(),
            1,
            "the turn not handed back"
        );
        assert_eq!(*sync::lock(&self.subscribed), 0);
        assert_eq!(*sync::lock(&self.belief), None);
    }
}

/// Task `i`'s lock value.
fn value(i: usize) -> ShortId {
    ShortId::with_counter("d2:checked", b':', i as u64)
}

/// A deadline no check reaches (its clock never moves).
fn never() -> Instant {
    time::now() + Duration::from_secs(3600)
}

/// The release of task `i`'s lock (`Hold::release_once`): this client's next waiter deferred
/// in the cohort is carried; `fail`: the request is lost on the way (the carried waiter is
/// promoted, as when the release's answer is an error). True if the lock was `i`'s.
async fn release_once(ctx: &Arc<Ctx>, i: usize, fail: bool) -> bool {
    let mut carried = Carried {
        ctx: ctx.clone(),
        carry: cohort::carry_next(&ctx.entry.cohort, 0),
    };
    in_flight().await;
    if fail {
        carried.answered(false);
        return false;
    }
    let ours = ctx.server.release(
        value(i).as_bytes(),
        carried.carry.as_ref().map(Carry::waiter),
    );
    in_flight().await;
    carried.answered(true);
    ours
}

/// `hold::Carried`: a release's carried waiter until its answer; dropped without one (the
/// release cancelled), it is settled as a failure.
struct Carried {
    ctx: Arc<Ctx>,
    carry: Option<Carry>,
}

impl Carried {
    /// `Hold::carried_answered`: a carried waiter that went away leaves after the release.
    fn answered(&mut self, ok: bool) {
        let Some(carry) = self.carry.take() else {
            return;
        };
        let gone = if ok { carry.confirm() } else { carry.failed() };
        if let Some(gone) = gone {
            leave_later(&self.ctx, gone.value);
        }
    }
}

impl Drop for Carried {
    fn drop(&mut self) {
        self.answered(false);
    }
}

/// `hold::release_later`: the release sent again in the background.
fn release_later(ctx: &Arc<Ctx>, i: usize) {
    let task = ctx.clone();
    ctx.cleanup(async move {
        release_once(&task, i, false).await;
    });
}

/// `QueueEntry`'s drop: `LEAVE_QUEUE` in the background.
fn leave_later(ctx: &Arc<Ctx>, value: ShortId) {
    let task = ctx.clone();
    ctx.cleanup(async move {
        in_flight().await;
        task.server.leave_queue(value.as_bytes());
    });
}

/// A task's belief that it holds the lock (`LockGuard`): one at a time, and only the lock's
/// holder; dropped, belief ends and the release goes in the background.
struct Guard {
    ctx: Arc<Ctx>,
    i: usize,
    armed: bool,
}

impl Guard {
    fn new(ctx: &Arc<Ctx>, i: usize) -> Self {
        let mut belief = sync::lock(&ctx.belief);
        assert_eq!(
            *belief, None,
            "task {i} believes it holds a lock task {belief:?} believes it holds"
        );
        assert_eq!(
            ctx.server.holder().as_deref(),
            Some(value(i).as_bytes()),
            "task {i} believes it holds a lock that is not its own"
        );
        *belief = Some(i);
        sync::lock(&ctx.held).push(i);
        Guard {
            ctx: ctx.clone(),
            i,
            armed: true,
        }
    }

    fn end_belief(&self) {
        let mut belief = sync::lock(&self.ctx.belief);
        if *belief == Some(self.i) {
            *belief = None;
        }
    }

    /// `LockGuard::release` (`fail`: the first request is lost, and retried in the background).
    async fn release(mut self, fail: bool) {
        self.end_belief();
        release_once(&self.ctx, self.i, fail).await;
        self.armed = fail;
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.end_belief();
        if self.armed {
            release_later(&self.ctx, self.i);
        }
    }
}

/// A waiter's subscription (`Subscription`): its interest, and the client's count of them.
struct Sub {
    interest: Interest,
    ctx: Arc<Ctx>,
}

impl Sub {
    /// `Waiters::subscribe`: counted, then the round trip of its `SUBSCRIBE`.
    async fn new(ctx: &Arc<Ctx>) -> Self {
        *sync::lock(&ctx.subscribed) += 1;
        let sub = Sub {
            interest: Interest::new(ctx.entry.clone(), 1),
            ctx: ctx.clone(),
        };
        in_flight().await;
        sub
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        self.interest.give_back();
        *sync::lock(&self.ctx.subscribed) -= 1;
    }
}

/// A waiter's entry in the queue (`QueueEntry`): dropped while armed, it leaves the queue in
/// the background, unless it waits in the client or its carrying release is still out.
struct Entry {
    ctx: Arc<Ctx>,
    i: usize,
    armed: bool,
    deferral: Option<Deferral>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.deferral.as_ref().is_some_and(|d| !d.leaving()) {
            return;
        }
        leave_later(&self.ctx, value(self.i));
    }
}

/// An attempt that may have been applied (`ReleaseOnDrop` armed around it): dropped while
/// armed (the waiter cancelled with its request out), what it took is released.
struct Pending {
    ctx: Arc<Ctx>,
    i: usize,
    armed: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            release_later(&self.ctx, self.i);
        }
    }
}

/// The steps of the first holder's body.
const BODY_STEPS: usize = 12;

/// A cancelled waiter is cancelled within this many steps of the canceller.
const CANCEL_WITHIN: usize = 40;

/// Runs a check's tasks: task 0 holds the lock and releases it (`fail_first`: its first
/// release is lost), tasks `1..=waiters` wait for it (`waiter(ctx, i)`), those in `cancel`
/// are cancelled by another task at a moment the checker picks. Then everything settles and
/// nothing may be left behind. Returns the order the lock was believed in.
async fn scenario<W, F>(waiters: usize, cancel: &[usize], fail_first: bool, waiter: W) -> Vec<usize>
where
    W: Fn(Arc<Ctx>, usize) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let ctx = Ctx::new();
    let holder = Guard::new(&ctx, 0);
    let deliver = spawn({
        let ctx = ctx.clone();
        async move { ctx.server.deliver().await }
    });
    let tasks: Vec<_> = (1..=waiters)
        .map(|i| (i, spawn(waiter(ctx.clone(), i))))
        .collect();
    let aborts: Vec<_> = tasks
        .iter()
        .filter(|(i, _)| cancel.contains(i))
        .map(|(_, task)| task.abort_handle())
        .collect();
    // Each cancellation comes after a number of steps the checker picks (its data choice),
    // so it falls anywhere in a waiter's life, not only at its start.
    let canceller = spawn(async move {
        use shuttle::rand::{thread_rng, Rng};
        for abort in aborts {
            for _ in 0..thread_rng().gen_range(0..CANCEL_WITHIN) {
                in_flight().await;
            }
            abort.abort();
        }
    });
    // The holder's body takes a while: the waiters line up behind it before its release.
    let holding = spawn(async move {
        for _ in 0..BODY_STEPS {
            in_flight().await;
        }
        holder.release(fail_first).await;
    });
    holding.await.expect("holder");
    canceller.await.expect("canceller");
    for (i, task) in tasks {
        let done = task.await;
        assert!(done.is_ok() || cancel.contains(&i), "waiter {i}: {done:?}");
    }
    ctx.settle().await;
    deliver.await.expect("deliver");
    ctx.assert_at_rest();
    let held = sync::lock(&ctx.held).clone();
    held
}
