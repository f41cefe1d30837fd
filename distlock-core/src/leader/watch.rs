//! A handle on one term for code that does not own its [`Leadership`](super::Leadership).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use crate::error::{Error, LossReason};
use crate::fence::Fence;
use crate::lease::Lease;

/// A term of this process as leader, seen from code that does not own the
/// [`Leadership`](super::Leadership): a task the leader spawned, a request handler, a health
/// endpoint. Cheap to clone; every method answers from memory, with no round trip.
///
/// It says the term no longer leads the moment its `Leadership` can no longer guarantee it
/// (the lease lost, or about to run out) and the moment the leader resigns or its `Leadership`
/// is dropped ([`LossReason::Released`]), before any other candidate can be elected.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::Error> {
/// let leadership = distlock_core::leader("scheduler").campaign().await?;
/// let watch = leadership.watch();
/// tokio::spawn(async move {
///     while watch.is_leader() {
///         // ... one step of the leader's work, fenced with watch.fence() ...
///         # tokio::time::sleep(std::time::Duration::from_millis(100)).await;
///     }
/// });
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderWatch {
    name: Arc<str>,
    term: u64,
    lease: Arc<Lease>,
}

impl LeaderWatch {
    pub(super) fn new(name: Arc<str>, term: u64, lease: Arc<Lease>) -> Self {
        LeaderWatch { name, term, lease }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The term this handle watches.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The term as a [`Fence`], for writes through [`fence`](mod@crate::fence).
    pub fn fence(&self) -> Fence {
        Fence::new(self.name(), self.term)
    }

    /// True while this term leads, guaranteed: no other candidate can have been elected.
    pub fn is_leader(&self) -> bool {
        self.lost_reason().is_none()
    }

    /// `Ok(())` while this term leads, otherwise [`Error::Lost`] with why
    /// ([`LossReason::Released`] once the leader resigned).
    pub fn ensure_held(&self) -> Result<(), Error> {
        self.lease.ensure_held(self.name())
    }

    /// Why this term no longer leads, or `None` while it does.
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.lease.lost_reason()
    }

    /// The instant until which this term is guaranteed, as far as this process knows.
    pub fn guaranteed_until(&self) -> Instant {
        self.lease.deadline()
    }

    /// Resolves when this term no longer leads (lost, resigned or dropped), before any other
    /// candidate can be elected.
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        let lease = self.lease.clone();
        async move { lease.lost().await }
    }
}

impl fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("name", &self.name)
            .field("term", &self.term)
            .field("lost", &self.lost_reason())
            .finish()
    }
}
