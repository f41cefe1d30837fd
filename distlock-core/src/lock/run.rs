//! Running a body under a lock ([`LockBuilder::run`]), with as little of it as possible generic
//! over the body.
//!
//! `run` is compiled once per body type: once per `#[distributed_lock]` function and per
//! hand-written `run(async { .. })`. Only what needs the body's type is generic here: holding the
//! body future, polling it when told to, dropping it, keeping its output (the named future [`Run`]
//! and its `Slot`). Everything else is the non-generic `session` (acquire, the re-entry frame, the
//! loss watch, the post-body lease check, the release sent without waiting; over RedLock the
//! release waited for and the mapping of its outcome) and `drive` (the order of polls: loss first,
//! then the body inside its frame), compiled once in this crate. Kept generic, they cost every
//! annotated function kilobytes of machine code and tens of milliseconds of release build (issue
//! 14; `scripts/codegen-cost.sh` measures it).
//!
//! The session is boxed, by `start`, here: its state machine (the whole acquire, waiting and
//! release path) is then compiled once, in this crate, and reached through its vtable. Held
//! inline in `run`'s future it was compiled again in every crate that calls `run`, drop glue
//! and all (the state machines of non-generic `async fn`s are instantiated where they are
//! used): about 10 s of release build for a crate's first locked function (issue 21). The body
//! reaches `drive` as a `&mut dyn BodySlot` for the length of one poll only, so `run`'s future
//! is `Send` exactly when the body and its output are.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use crate::client::Boxed;
use crate::error::{Error, LossReason};
use crate::lock::builder::LockBuilder;
use crate::lock::context::{Entered, Frame};
use crate::lock::guard::LockGuard;
use crate::lock::hold::Released;

impl LockBuilder {
    /// Runs `body` while holding the lock, then releases it.
    ///
    /// The body sees [`crate::fencing_token`] and re-enters this lock instead of deadlocking.
    ///
    /// Returns `Ok` only if the body ran entirely inside the lease: it completed before the
    /// lease could have run out, and no loss was reported while it ran. The result is decided
    /// then, when the body completes. Otherwise [`Error::Lost`]:
    /// * the lease can no longer be guaranteed while the body runs (renewal found the lock lost,
    ///   Redis stayed unreachable or refused renewal, or without renewal the ttl elapsed): the
    ///   body future is dropped at its next await point;
    /// * the process stalled (a pause, a blocked executor thread) past the lease and the body
    ///   completed afterwards: its output is dropped;
    /// * the lease ran out before the body was first polled: the body never starts.
    ///
    /// What it waits for: the acquire's answer (and, with `wait`, the lock), then the body.
    /// Not the release's answer: once the body completed inside its lease, the release is sent
    /// at once, queued on the client's command connection (or in its group commit) before
    /// `run` returns, so it reaches Redis before anything this client sends next (the same
    /// client taking the lock again right after finds it free), and `run` returns. An
    /// uncontended `run` costs its caller one round trip. The release's answer is handled off
    /// the caller's path (by the task that sends the group, and a failure or a lock found not
    /// ours by a task on the client's own runtime): a transient failure is retried until the lease's end; what it
    /// found goes to tracing and to `distlock_sent_releases_total` (a lock found gone or
    /// another owner's was taken from under the lease without renewal noticing: fencing is
    /// what protects against that, see [`crate::fencing_token`]); unanswered, the lock expires
    /// at its ttl. A re-entrant `run` only lets go of its hold on the client. The release is
    /// written once the caller's runtime runs the task that sends it (at the caller's next
    /// await, typically): another connection may still see the lock for that moment. A
    /// process that returns from `main` right after `run` needs nothing more (the runtime's
    /// shutdown waits for the release's answer); one that exits otherwise
    /// (`std::process::exit`) awaits [`crate::shutdown`] or [`crate::Client::settle`] first.
    ///
    /// Over a RedLock quorum ([`crate::Config::redlock`]) `run` waits for the release's answer
    /// until the lease's end at most: the requests to the masters are not ordered with the
    /// client's next acquire of the lock. An answer by then that the lock was gone or another
    /// owner's is [`Error::Lost`]; an answer still out then does not change the result (`Ok`
    /// by the lease's end; the release goes on in the background).
    ///
    /// [`LockGuard::release`] (the manual API) waits for the release's answer.
    ///
    /// The returned future ([`Run`]) is `Send` when `body` and its output are. Dropping it at
    /// any point never leaves the lock held: the lock is released in the background.
    pub fn run<F: Future>(self, body: F) -> Run<F> {
        let link = Arc::new(Link::new());
        Run {
            session: Some(start(self, &link)),
            link,
            body: Some(body),
            out: None,
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`LockBuilder::run`]: the lock's session (acquire, loss watch, release)
    /// and the body, polled in that order; its output is the body's, or the [`Error`] that kept
    /// the body from running entirely inside the lease.
    ///
    /// A named future rather than an `async fn`'s: each body type (each `#[distributed_lock]`
    /// function) compiles this struct's `poll` and drop, a few lines around the non-generic
    /// `drive`, instead of a state machine of its own (issue 31).
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Run<F: Future> {
        // Everything besides the body, boxed (see the module docs); `None` once done.
        session: Option<Boxed<Result<(), Error>>>,
        link: Arc<Link>,
        #[pin]
        body: Option<F>,
        out: Option<F::Output>,
    }

    impl<F: Future> PinnedDrop for Run<F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            // Cancelled with the body alive: the body is dropped inside its frame (as it was
            // polled), and before the session lets the lock go; the frame is left last.
            let entered = match this.link.phase() {
                BODY | STOP => this.link.enter(),
                _ => None,
            };
            this.body.set(None);
            drop(this.session.take());
            drop(entered);
        }
    }
}

impl<F: Future> Future for Run<F> {
    type Output = Result<F::Output, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(session) = this.session.as_mut() else {
            polled_after_done()
        };
        let mut slot = Slot {
            body: this.body,
            out: this.out,
        };
        let done = ready!(drive(session.as_mut(), this.link, cx, &mut slot));
        drop(this.session.take());
        Poll::Ready(match done {
            Ok(()) => match this.out.take() {
                Some(out) => Ok(out),
                None => output_missing(),
            },
            Err(error) => Err(error),
        })
    }
}

/// The non-generic part of `run` (see [`session`]), as `drive` polls it.
type Session = dyn Future<Output = Result<(), Error>> + Send;

/// Starts `run`'s session: boxed here, so that its state machine and its vtable are compiled
/// in this crate only (see the module docs). Never inlined into a caller's crate, for the same
/// reason.
#[inline(never)]
fn start(builder: LockBuilder, link: &Arc<Link>) -> Boxed<Result<(), Error>> {
    Box::pin(session(builder, link.clone()))
}

/// The body as `drive` sees it, for one poll of `run`: the only code compiled per body type.
trait BodySlot {
    /// `Some(cx)` polls the body (`Ready` once it completed, its output kept); `None` drops it.
    fn poll_body(&mut self, cx: Option<&mut Context<'_>>) -> Poll<()>;
}

/// Borrows only, so it has no drop glue of its own (nor a vtable entry for one).
struct Slot<'a, F: Future> {
    body: Pin<&'a mut Option<F>>,
    out: &'a mut Option<F::Output>,
}

impl<F: Future> BodySlot for Slot<'_, F> {
    fn poll_body(&mut self, cx: Option<&mut Context<'_>>) -> Poll<()> {
        let Some(cx) = cx else {
            self.body.set(None);
            return Poll::Ready(());
        };
        let Some(body) = self.body.as_mut().as_pin_mut() else {
            return Poll::Ready(());
        };
        let out = ready!(body.poll(cx));
        self.body.set(None);
        *self.out = Some(out);
        Poll::Ready(())
    }
}

#[cold]
#[inline(never)]
fn output_missing() -> ! {
    unreachable!("run's session returned Ok before its body completed")
}

#[cold]
#[inline(never)]
fn polled_after_done() -> ! {
    panic!("`run`'s future polled after it completed")
}

/// Where the session and the body are: what `session` and `drive` tell each other. Only the
/// task polling `run` touches it (atomics only so that `run`'s future is `Send`).
struct Link {
    phase: AtomicU8,
    /// The body's frame, from the acquire on.
    frame: OnceLock<Frame>,
}

/// Acquiring; the body is not polled.
const ACQUIRING: u8 = 0;
/// Held: `drive` polls the body (inside its frame) after the session.
const BODY: u8 = 1;
/// The body completed; the session checks the lease and releases.
const DONE: u8 = 2;
/// The lease was lost while the body ran: `drive` drops the body, then says `STOPPED`.
const STOP: u8 = 3;
const STOPPED: u8 = 4;

impl Link {
    fn new() -> Self {
        Link {
            phase: AtomicU8::new(ACQUIRING),
            frame: OnceLock::new(),
        }
    }

    fn phase(&self) -> u8 {
        self.phase.load(Ordering::Relaxed)
    }

    fn set(&self, phase: u8) {
        self.phase.store(phase, Ordering::Relaxed);
    }

    fn enter(&self) -> Option<Entered> {
        self.frame.get().map(Frame::enter)
    }
}

/// One poll of `run`: the session first (acquire; the loss watch, which goes before the body;
/// the release), then the body inside its frame while the session holds the lock, until the
/// session is done.
fn drive(
    mut session: Pin<&mut Session>,
    link: &Link,
    cx: &mut Context<'_>,
    body: &mut dyn BodySlot,
) -> Poll<Result<(), Error>> {
    loop {
        if let Poll::Ready(result) = session.as_mut().poll(cx) {
            return Poll::Ready(result);
        }
        match link.phase() {
            BODY => {
                let entered = link.enter();
                let polled = body.poll_body(Some(cx));
                drop(entered);
                if polled.is_pending() {
                    return Poll::Pending;
                }
                // Completed: the session sees it at once (lease check, release).
                link.set(DONE);
            }
            STOP => {
                let entered = link.enter();
                let _ = body.poll_body(None);
                drop(entered);
                link.set(STOPPED);
            }
            // Acquiring or releasing: the session is waiting for Redis.
            _ => return Poll::Pending,
        }
    }
}

/// Everything `run` does besides the body: `Ok` only if the body completed entirely inside the
/// lease with no loss reported while it ran; the release is then sent and not waited for
/// (over RedLock it is waited for until the lease's end at most).
async fn session(builder: LockBuilder, link: Arc<Link>) -> Result<(), Error> {
    let guard = builder.acquire_here().await?;
    let hold = guard.hold();
    let frame = Frame::new(
        hold.client.identity(),
        (hold.clone(), guard.named()),
        guard.token(),
        guard.lease().clone(),
    );
    let _ = link.frame.set(frame);
    link.set(BODY);
    let mut loss = pin!(guard.lost());
    // Loss first: a lease that ran out before the body's first poll (or while the executor was
    // blocked) stops the body before it takes another step.
    let loss = poll_fn(|cx| match loss.as_mut().poll(cx) {
        Poll::Ready(reason) => Poll::Ready(Some(reason)),
        Poll::Pending if link.phase() == DONE => Poll::Ready(None),
        Poll::Pending => Poll::Pending,
    })
    .await;
    if let Some(reason) = loss {
        if link.phase() == BODY {
            // The body goes before the lock: `drive` drops it as soon as this returns.
            link.set(STOP);
            poll_fn(|_| match link.phase() {
                STOPPED => Poll::Ready(()),
                _ => Poll::Pending,
            })
            .await;
        }
        return Err(abandon(guard, reason));
    }
    // The body may have completed only after a stall past the lease.
    if let Some(reason) = guard.lost_reason() {
        return Err(abandon(guard, reason));
    }
    // Decided: the body completed inside its lease. The release goes out now, ordered before
    // anything this client sends next, and is confirmed off the caller's path.
    if !guard.hold().client.counts_majority() {
        guard.send_release();
        return Ok(());
    }
    // A RedLock quorum waits for its release: its requests to the masters are not ordered
    // with the caller's next acquire of this lock (see `LockBuilder::run`).
    let hold = guard.hold().clone();
    // The release is waited for until the lease's end at most: an answer still out then is
    // unknown, and unknown means `Ok` (the body completed inside its lease); dropped here, the
    // release goes on in the background, bounded by the response timeout.
    let lease_end = guard.lease().deadline();
    let released = match tokio::time::timeout_at(lease_end, guard.finish()).await {
        Ok(released) => released,
        Err(_) => {
            tracing::warn!(key = %hold.key().name(), "body finished inside its lease but the release was not answered by the lease's end; it goes on in the background (the lock expires at its ttl otherwise)");
            return Ok(());
        }
    };
    // Answered inside the lease that the lock is not ours: it was taken from under the lease
    // (deleted, evicted, lost in a failover), so the body may not have run exclusively.
    let reason = match released {
        Ok(Released::Yes) => return Ok(()),
        Ok(Released::OtherOwner | Released::Incompatible) => LossReason::Stolen,
        Ok(Released::Absent) => LossReason::Expired,
        Err(Error::Lost { reason, .. }) => reason,
        Err(error) => {
            tracing::warn!(key = %hold.key().name(), %error, "body finished inside its lease but the release failed; the lock expires at its ttl");
            return Ok(());
        }
    };
    Err(lost(hold.key().name().to_owned(), reason))
}

/// The lease was lost while the body ran (the body is gone): dropping the guard releases
/// whatever is still ours in the background.
fn abandon(guard: LockGuard, reason: LossReason) -> Error {
    let key = guard.name().to_owned();
    drop(guard);
    lost(key, reason)
}

/// [`Error::Lost`] for a lock lost under its body.
fn lost(key: String, reason: LossReason) -> Error {
    tracing::warn!(key = %key, %reason, "lock lost while the body ran");
    Error::Lost { key, reason }
}
