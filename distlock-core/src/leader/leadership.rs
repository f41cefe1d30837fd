//! A won election: the lock's guard and the term it proclaimed.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::error::{Error, LossReason, Operation};
use crate::fence::Fence;
use crate::lease::Lease;
use crate::lock::backoff::Backoff;
use crate::lock::builder::LockBuilder;
use crate::lock::context::Frame;
use crate::lock::guard::LockGuard;
use crate::metrics::Leading;
use crate::wire::calls::{ProclaimCall, Proclaimed};

/// This candidate leads: the election's lock, renewed, and its term. Dropping it (or
/// [`Leadership::resign`]) hands leadership to the next candidate.
///
/// Its methods are the lock guard's ([`LockGuard`]), with the term as the fencing token.
#[derive(Debug)]
#[must_use = "dropping a Leadership resigns it at once"]
pub struct Leadership {
    guard: LockGuard,
    term: u64,
    since: SystemTime,
    identity: String,
    leading: Term,
}

/// The term's end, when its [`Leadership`] goes (resigned, dropped, or ended by `run`).
struct Term {
    metric: Leading,
    lease: Arc<Lease>,
}

impl Drop for Term {
    fn drop(&mut self) {
        self.metric.end(self.lease.lost_reason());
    }
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Term")
    }
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// This leader's term: strictly greater than every earlier term of the name, and its
    /// fencing token.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The term as a [`Fence`], for writes through [`fence`](mod@crate::fence): a store
    /// refuses them once a later leader has written.
    pub fn fence(&self) -> Fence {
        Fence::new(self.name(), self.term)
    }

    /// What followers see of this leader.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// When this term started, by the Redis server's clock.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// How long this candidate has led.
    pub fn held_for(&self) -> Duration {
        self.guard.held_for()
    }

    /// The instant until which leadership is guaranteed ([`LockGuard::guaranteed_until`]).
    pub fn guaranteed_until(&self) -> Instant {
        self.guard.guaranteed_until()
    }

    /// Why leadership was lost, or `None` while it is guaranteed.
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.guard.lost_reason()
    }

    /// `Ok(())` while leadership is guaranteed, otherwise [`Error::Lost`]: no other candidate
    /// can have been elected while this says `Ok`. Call it before an irreversible step (and
    /// still fence the step).
    pub fn ensure_held(&self) -> Result<(), Error> {
        self.guard.ensure_held()
    }

    /// Resolves when leadership can no longer be guaranteed, before any other candidate can
    /// be elected ([`LockGuard::lost`]). Does not borrow the leadership.
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        self.guard.lost()
    }

    /// The frame a body led under runs in ([`LeaderBuilder::run`](super::LeaderBuilder::run)):
    /// the election's hold, with the term as its token.
    pub(super) fn frame(&self) -> Frame {
        let hold = self.guard.hold();
        Frame::new(
            hold.client.identity(),
            hold.clone(),
            Some(self.term),
            self.guard.lease().clone(),
        )
    }

    /// Steps down: the next candidate is elected at once (handed the lock by this release).
    /// `Err(Lost)` if leadership had already been lost.
    pub async fn resign(self) -> Result<(), Error> {
        let Leadership { guard, leading, .. } = self;
        let released = guard.release().await;
        drop(leading);
        released
    }
}

/// Campaigns with `lock` until elected, then proclaims the term.
pub(super) async fn campaign(lock: LockBuilder, identity: String) -> Result<Leadership, Error> {
    let lock = lock.fenced(true).renew(true).wait(Duration::MAX);
    loop {
        let guard = lock.clone().acquire().await?;
        match proclaim(&guard, &identity).await {
            Ok(Some(p)) => {
                let leading = Term {
                    metric: Leading::start(guard.name()),
                    lease: guard.lease().clone(),
                };
                return Ok(Leadership {
                    guard,
                    term: p.term,
                    since: SystemTime::UNIX_EPOCH + Duration::from_millis(p.since_ms),
                    identity,
                    leading,
                });
            }
            // Lost before the term was written: campaign again.
            Ok(None) => {
                let _ = guard.release().await;
            }
            Err(error) => {
                let _ = guard.release().await;
                if !error.is_transient() {
                    return Err(error);
                }
            }
        }
    }
}

/// Writes the term of the lock `guard` holds, retrying transient failures while the lock is
/// guaranteed. `None` when the lock is no longer this guard's.
async fn proclaim(guard: &LockGuard, identity: &str) -> Result<Option<Proclaimed>, Error> {
    let hold = guard.hold();
    let client = &hold.client;
    let token = guard
        .token()
        .expect("an election's lock is taken with fenced(true)");
    let mut backoff = Backoff::default();
    loop {
        let id = client.new_request_id();
        let call = ProclaimCall {
            keys: &hold.keys,
            id: id.as_bytes(),
            value: hold.value.as_bytes(),
            token,
            identity,
            retention: client.config().fence_retention,
            sharded: client.sharded_pubsub(),
        };
        match client.call(Operation::Acquire, guard.name(), &call).await {
            Err(error) if error.is_transient() && guard.ensure_held().is_ok() => {
                let again = backoff.next(Instant::now(), guard.guaranteed_until());
                tokio::time::sleep_until(again).await;
            }
            other => return other,
        }
    }
}
