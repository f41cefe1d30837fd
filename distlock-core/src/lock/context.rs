//! The locks held by the current call chain: re-entry and [`fencing_token`].
//!
//! `LockBuilder::run` (and so `#[distributed_lock]`) runs its body inside a frame naming the
//! held lock. An acquisition of the same name through the same client inside that body
//! re-enters with the same owner instead of deadlocking. A task spawned inside the body does not
//! inherit the frame, so it is a different owner.
//!
//! The frame is task-local the way tokio's `task_local!` is (a thread-local set around each poll
//! of the body, and around its drop), but entered by a non-generic [`Frame::enter`]: tokio's
//! `TaskLocalFuture<T, F>` would be compiled again for every body type.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::error::Error;
use crate::fence::Fence;
use crate::lease::Lease;
use crate::lock::hold::Hold;

thread_local! {
    /// The innermost frame of the body being polled on this thread, if any.
    static HELD: Cell<Option<Frame>> = const { Cell::new(None) };
}

/// One held lock in the current call chain.
#[derive(Clone)]
pub(crate) struct Frame(Arc<FrameData>);

struct FrameData {
    client: usize,
    /// The acquisition a re-entry joins.
    hold: Hold,
    /// Which of the hold's locks this frame is about (its index in `hold.keys()`): a lock
    /// of a set re-entered alone names that lock, not the set's first.
    named: usize,
    token: Option<u64>,
    /// The held lease: a re-entry that finds the lock gone marks it lost.
    lease: Arc<Lease>,
    parent: Option<Frame>,
}

impl Frame {
    /// A frame for a lock taken in the current call chain (whose innermost frame, if any,
    /// becomes its parent): the `named` lock of `hold` (its index in `hold.keys()`).
    pub(crate) fn new(
        client: usize,
        (hold, named): (Hold, usize),
        token: Option<u64>,
        lease: Arc<Lease>,
    ) -> Self {
        let parent = current();
        Frame(Arc::new(FrameData {
            client,
            hold,
            named,
            token,
            lease,
            parent,
        }))
    }

    /// Makes this frame the innermost held lock on this thread until the returned guard is
    /// dropped: around one poll (or the drop) of the body.
    pub(crate) fn enter(&self) -> Entered {
        // `None` only while the thread is being torn down: the body then runs without a frame.
        let previous = HELD.try_with(|held| held.replace(Some(self.clone())));
        Entered { previous }
    }
}

impl Frame {
    /// `body`, polled and dropped inside this frame: a body run under a hold that does not go
    /// through `LockBuilder::run` (a leader's, `LeaderBuilder::run`).
    pub(crate) fn around<F: Future>(self, body: F) -> InFrame<F> {
        InFrame {
            frame: self,
            body: Some(Box::pin(body)),
        }
    }
}

/// A body inside its frame ([`Frame::around`]).
pub(crate) struct InFrame<F> {
    frame: Frame,
    /// `None` once the body completed (dropped inside the frame then).
    body: Option<Pin<Box<F>>>,
}

impl<F: Future> Future for InFrame<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.frame.enter();
        let body = this
            .body
            .as_mut()
            .expect("an InFrame is not polled after it completed");
        let out = body.as_mut().poll(cx);
        if out.is_ready() {
            this.body = None;
        }
        out
    }
}

impl<F> Drop for InFrame<F> {
    fn drop(&mut self) {
        let _entered = self.frame.enter();
        self.body = None;
    }
}

/// Puts the frame that was innermost before [`Frame::enter`] back (also when the poll panics).
pub(crate) struct Entered {
    previous: Result<Option<Frame>, std::thread::AccessError>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Ok(previous) = &mut self.previous {
            let previous = previous.take();
            let _ = HELD.try_with(|held| held.set(previous));
        }
    }
}

impl FrameData {
    /// The name of the lock this frame is about.
    fn name(&self) -> &str {
        self.hold.keys()[self.named].name()
    }
}

/// The innermost frame on this thread (`None` outside a body run under a lock).
fn current() -> Option<Frame> {
    HELD.try_with(|held| {
        let frame = held.take();
        held.set(frame.clone());
        frame
    })
    .ok()
    .flatten()
}

/// The lock a re-entry joins: the outer hold of `name` through `client` in this call chain.
pub(crate) struct Outer {
    pub(crate) hold: Hold,
    /// Which of the hold's locks the re-entry asked for (its index in `hold.keys()`).
    pub(crate) named: usize,
    pub(crate) token: Option<u64>,
    pub(crate) lease: Arc<Lease>,
}

/// The outer hold to re-enter, if this call chain holds `name` through `client`.
pub(crate) fn reentry(client: usize, name: &str) -> Option<Outer> {
    let innermost = current();
    let mut cursor = innermost.as_ref();
    while let Some(Frame(data)) = cursor {
        let at = data.hold.keys().iter().position(|k| k.name() == name);
        if let (true, Some(named)) = (data.client == client, at) {
            return Some(Outer {
                hold: data.hold.clone(),
                named,
                // A set's lock `name`: its own token.
                token: data.hold.token_of(name, data.token),
                lease: data.lease.clone(),
            });
        }
        cursor = data.parent.as_ref();
    }
    None
}

/// The fence of the innermost lock held by the body this is called from (an annotated
/// function or a [`run`](crate::LockBuilder::run) body); for a set of locks, its first lock's
/// ([`fence_of`] names one).
///
/// Fails with [`Error::NotFenced`], saying which: `key: None` outside any locked body (a task
/// spawned inside the body does not inherit it: pass it the [`Fence`]), `key: Some(name)` when
/// the innermost lock was taken without `fenced`.
pub fn fence() -> Result<Fence, Error> {
    match held_lock() {
        None => Err(Error::NotFenced { key: None }),
        Some((name, None)) => Err(Error::NotFenced { key: Some(name) }),
        Some((name, Some(token))) => Ok(Fence::new(name, token)),
    }
}

/// The fence of the lock `name` held by the body this is called from (the innermost hold of
/// it): for a set of locks each lock has its own token. Fails with [`Error::NotFenced`]:
/// `key: None` when the call chain does not hold `name`, `key: Some(name)` when it holds it
/// without `fenced`.
pub fn fence_of(name: &str) -> Result<Fence, Error> {
    match holds(name) {
        None => Err(Error::NotFenced { key: None }),
        Some(None) => Err(Error::NotFenced {
            key: Some(name.to_owned()),
        }),
        Some(Some(token)) => Ok(Fence::new(name, token)),
    }
}

/// `Ok(())` while every lock held by the body this is called from is still guaranteed (the
/// innermost one, and the ones held around it in the same call chain); otherwise
/// [`Error::Lost`] naming the first one that is not. Call it before an irreversible step inside
/// an annotated function, a [`run`](crate::LockBuilder::run) body or a leader's
/// [`run`](crate::LeaderBuilder::run) body, where there is no guard to ask (and still fence
/// the step: a pause right after this check is not seen by it).
///
/// Fails with [`Error::NotLocked`] outside any locked body (a task spawned inside the body does
/// not inherit its locks).
pub fn ensure_held() -> Result<(), Error> {
    let innermost = current().ok_or(Error::NotLocked)?;
    let mut cursor = Some(&innermost);
    while let Some(Frame(data)) = cursor {
        data.lease.ensure_held(data.name())?;
        cursor = data.parent.as_ref();
    }
    Ok(())
}

/// The fencing token of the innermost lock held by this call chain, or `None` outside a body
/// run under a lock (`#[distributed_lock]` or [`LockBuilder::run`](crate::LockBuilder::run)).
///
/// Pass it to the protected resource so it can reject writes from a holder whose lock has since
/// been taken by someone else (see the crate docs on fencing).
///
/// `None` too when the innermost lock was taken without a fencing token (see
/// [`LockBuilder::fenced`](crate::LockBuilder::fenced) and the attribute's `fenced`).
pub fn fencing_token() -> Option<u64> {
    current().and_then(|frame| frame.0.token)
}

/// The fencing token of the lock `name` held by this call chain (the innermost hold of it), or
/// `None` if the call chain does not hold `name` or took it without a fencing token.
///
/// For a set of locks taken together ([`lock_all`](crate::lock_all), `key = [...]`) each lock
/// has its own token, strictly increasing per name: pass each resource the token of its own
/// lock. For one lock this is [`fencing_token`] when `name` is the innermost lock.
pub fn fencing_token_of(name: &str) -> Option<u64> {
    holds(name).flatten()
}

/// `Some(token)` if this call chain holds `name` (the innermost hold of it), the token `None`
/// when it was taken without one.
pub(crate) fn holds(name: &str) -> Option<Option<u64>> {
    let innermost = current();
    let mut cursor = innermost.as_ref();
    while let Some(Frame(data)) = cursor {
        if data.hold.covers(name) {
            return Some(data.hold.token_of(name, data.token));
        }
        cursor = data.parent.as_ref();
    }
    None
}

/// The innermost lock held by this call chain (a set: its first lock) and its token.
pub(crate) fn held_lock() -> Option<(String, Option<u64>)> {
    current().map(|frame| (frame.0.name().to_owned(), frame.0.token))
}

/// `Some` inside a body run under a lock, holding the innermost lock's fencing token (if it has
/// one); `None` outside (`assert_locked!`).
pub(crate) fn held_token() -> Option<Option<u64>> {
    current().map(|frame| frame.0.token)
}
