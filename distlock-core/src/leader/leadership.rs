//! A won election: the lock's guard and the term it proclaimed.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::{Error, LossReason, Operation};
use crate::fence::Fence;
use crate::lease::{fence_kept, Lease};
use crate::lock::backoff::Backoff;
use crate::lock::builder::LockBuilder;
use crate::lock::context::Frame;
use crate::lock::guard::LockGuard;
use crate::lock::hold::Hold;
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

/// The term's end, when its [`Leadership`] goes (resigned, dropped, or ended by `run`): its
/// metric, and the task keeping its record ([`keep_record`]).
struct Term {
    metric: Leading,
    lease: Arc<Lease>,
    keeper: AbortHandle,
}

impl Drop for Term {
    fn drop(&mut self) {
        self.keeper.abort();
        // A term resigned (or dropped) ended; only a term lost counts as lost.
        let lost = self
            .lease
            .lost_reason()
            .filter(|reason| *reason != LossReason::Released);
        self.metric.end(lost);
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
    let lock = lock.fenced(true).renew(true).wait(Duration::MAX).election();
    loop {
        let guard = lock.clone().acquire().await?;
        let config = guard.hold().client.config();
        let retention = fence_kept(config.fence_retention, lock.ttl_in(config));
        match proclaim(&guard, &identity, retention).await {
            Ok(Some(p)) => {
                let keeper = guard.hold().client.spawn_task(keep_record(
                    guard.hold().clone(),
                    Proclaim {
                        token: term_token(&guard),
                        identity: identity.clone(),
                        retention,
                    },
                    guard.lease().clone(),
                ));
                let leading = Term {
                    metric: Leading::start(guard.name()),
                    lease: guard.lease().clone(),
                    keeper,
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
async fn proclaim(
    guard: &LockGuard,
    identity: &str,
    retention: Duration,
) -> Result<Option<Proclaimed>, Error> {
    let proclaim = Proclaim {
        token: term_token(guard),
        identity: identity.to_owned(),
        retention,
    };
    let mut backoff = Backoff::default();
    loop {
        match proclaim_once(guard.hold(), &proclaim).await {
            Err(error) if error.is_transient() && guard.ensure_held().is_ok() => {
                let again = backoff.next(Instant::now(), guard.guaranteed_until());
                tokio::time::sleep_until(again).await;
            }
            other => return other,
        }
    }
}

/// The fencing token of the election's hold.
fn term_token(guard: &LockGuard) -> u64 {
    guard
        .token()
        .expect("an election's lock is taken with fenced(true)")
}

/// What a term's proclaim writes: its token, the leader's identity, and how long the fence
/// floor and the record are kept after it.
struct Proclaim {
    token: u64,
    identity: String,
    retention: Duration,
}

/// One `LEADER_PROCLAIM` of `hold`'s term; for a record `hold` already owns, it only renews the
/// record's expiry.
async fn proclaim_once(hold: &Hold, proclaim: &Proclaim) -> Result<Option<Proclaimed>, Error> {
    let client = &hold.client;
    let id = client.new_request_id();
    let call = ProclaimCall {
        keys: &hold.keys,
        id: id.as_bytes(),
        value: hold.value.as_bytes(),
        token: proclaim.token,
        identity: &proclaim.identity,
        retention: proclaim.retention,
        sharded: client.sharded_pubsub(),
    };
    client
        .call(Operation::Acquire, hold.keys.name(), &call)
        .await
}

/// While the term lasts, proclaims it again every third of the retention ([`fence_kept`]), which
/// renews the record's expiry (`LEADER_PROCLAIM` for its own owner): a leader's record never
/// expires under it, and the record of a name no longer elected goes a retention after its last
/// leader. Ends when the lease is lost, or is aborted when the [`Leadership`] goes; a failed write
/// is tried again at the next period (two more before the record could expire).
async fn keep_record(hold: Hold, proclaim: Proclaim, lease: Arc<Lease>) {
    let every = proclaim.retention / 3;
    let lost = lease.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            _ = &mut lost => return,
            () = tokio::time::sleep(every) => {}
        }
        match proclaim_once(&hold, &proclaim).await {
            // Not this hold's lock any more: the lease will say so.
            Ok(None) => return,
            Ok(Some(_)) => {}
            Err(error) => {
                tracing::debug!(name = %hold.keys.name(), %error, "a leader's record not renewed; trying again next period");
            }
        }
    }
}
