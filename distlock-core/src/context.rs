//! The locks held by the current call chain: re-entry and [`fencing_token`].
//!
//! `LockBuilder::run` (and so `#[distributed_lock]`) runs its body inside a task-local frame
//! naming the held lock. An acquisition of the same name through the same client inside that
//! body re-enters with the same owner instead of deadlocking. A task spawned inside the body
//! does not inherit the frame, so it is a different owner.

use std::future::Future;
use std::sync::Arc;

use crate::guard::Hold;
use crate::lease::Lease;

tokio::task_local! {
    static HELD: Frame;
}

/// One held lock in the current call chain.
#[derive(Clone)]
pub(crate) struct Frame(Arc<FrameData>);

struct FrameData {
    client: usize,
    /// The acquisition a re-entry joins.
    hold: Hold,
    token: Option<u64>,
    /// The held lease: a re-entry that finds the lock gone marks it lost.
    lease: Arc<Lease>,
    parent: Option<Frame>,
}

impl Frame {
    pub(crate) fn new(client: usize, hold: Hold, token: Option<u64>, lease: Arc<Lease>) -> Self {
        let parent = HELD.try_with(Frame::clone).ok();
        Frame(Arc::new(FrameData {
            client,
            hold,
            token,
            lease,
            parent,
        }))
    }

    /// Runs `fut` with this frame as the innermost held lock.
    pub(crate) fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        HELD.scope(self, fut)
    }
}

/// The lock a re-entry joins: the outer hold of `name` through `client` in this call chain.
pub(crate) struct Outer {
    pub(crate) hold: Hold,
    pub(crate) token: Option<u64>,
    pub(crate) lease: Arc<Lease>,
}

/// The outer hold to re-enter, if this call chain holds `name` through `client`.
pub(crate) fn reentry(client: usize, name: &str) -> Option<Outer> {
    HELD.try_with(|frame| {
        let mut cursor = Some(frame);
        while let Some(Frame(data)) = cursor {
            if data.client == client && data.hold.keys.name == name {
                return Some(Outer {
                    hold: data.hold.clone(),
                    token: data.token,
                    lease: data.lease.clone(),
                });
            }
            cursor = data.parent.as_ref();
        }
        None
    })
    .ok()
    .flatten()
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
    HELD.try_with(|frame| frame.0.token).ok().flatten()
}
