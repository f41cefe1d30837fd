//! A won election: the lock's guard and the term it proclaimed, the campaign that wins it, and
//! the task that keeps its record while it lasts.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
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
use crate::wire::calls::{ProclaimCall, ProclaimMode, Proclaimed};
use crate::wire::keys::LockKeys;
use crate::wire::request::ReplicaWait;

use super::candidates::Candidacy;
use super::health::LeaderHealth;
use super::memory;
use super::watch::LeaderWatch;

/// Proclaim rounds over a RedLock quorum before the campaign gives the term up and tries again:
/// each round after the first writes the largest term the masters asked for on every master
/// (they agree in the second unless a master's own last term is above it).
const AGREEMENT_ROUNDS: usize = 4;

/// This candidate leads: the election's lock, renewed, and its term. Dropping it (or
/// [`Leadership::resign`]) hands leadership to the next candidate, and ends belief at once:
/// every [`Leadership::lost`] and [`LeaderWatch`] of the term says
/// [`LossReason::Released`] before the next candidate can be elected. (The `Leadership` a body
/// of [`LeaderBuilder::run`](super::LeaderBuilder::run) is given is the exception: dropped,
/// it goes back to `run`, which lets go when the body completes.)
///
/// Its methods are the lock guard's ([`LockGuard`]), with the term as the fencing token.
#[derive(Debug)]
#[must_use = "dropping a Leadership resigns it at once"]
pub struct Leadership {
    /// `None` only once resigned or handed back (never seen through `&self`).
    held: Option<Held>,
    /// Where a dropped `Leadership` goes instead of letting go: `run`'s, while its body runs.
    back: Option<Lent>,
}

/// A `Leadership` lent to a body by `run`: where it goes when the body drops it.
pub(super) type Lent = Arc<std::sync::Mutex<Option<Held>>>;

/// What a [`Leadership`] holds.
#[derive(Debug)]
pub(super) struct Held {
    guard: LockGuard,
    term: u64,
    since: SystemTime,
    identity: String,
    /// What a proclaim of this term writes (its token, retention, replicas).
    proclaim: Proclaim,
    leading: Term,
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let (Some(back), Some(held)) = (&self.back, self.held.take()) {
            *crate::sync::lock(back) = Some(held);
        }
        // Otherwise `held`, if any, drops here: the lock is let go.
    }
}

/// The term's end, when its [`Leadership`] goes (resigned, dropped, or ended by `run`): its
/// metric, the task keeping its record ([`keep_record`]), and the health check it reports to.
struct Term {
    metric: Arc<TermMetric>,
    lease: Arc<Lease>,
    keeper: AbortHandle,
    health: Option<LeaderHealth>,
    name: String,
    term: u64,
    /// This client among the election's candidates, while it leads.
    _candidacy: Candidacy,
}

/// `distlock_leader` and `distlock_leader_lost_total` of one term: a loss counted once, when
/// it happens (by the record's keeper) or at the latest when the term's [`Leadership`] goes.
struct TermMetric {
    metric: Leading,
    counted: AtomicBool,
}

impl TermMetric {
    fn lost(&self, reason: LossReason) {
        if reason != LossReason::Released && !self.counted.swap(true, Ordering::AcqRel) {
            self.metric.lost(reason);
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        self.keeper.abort();
        if let Some(reason) = self.lease.lost_reason() {
            self.metric.lost(reason);
        }
        self.metric.metric.end();
        if let Some(health) = &self.health {
            health.ended(&self.name, self.term);
        }
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
        self.held().guard.name()
    }

    /// This leader's term: strictly greater than every earlier term of the name, and its
    /// fencing token.
    pub fn term(&self) -> u64 {
        self.held().term
    }

    /// The term as a [`Fence`], for writes through [`fence`](mod@crate::fence): a store
    /// refuses them once a later leader has written, or claimed the store on its election.
    pub fn fence(&self) -> Fence {
        Fence::new(self.name(), self.held().term)
    }

    /// What followers see of this leader ([`Leadership::proclaim`] changes it).
    pub fn identity(&self) -> &str {
        &self.held().identity
    }

    /// When this term started, by the Redis server's clock.
    pub fn since(&self) -> SystemTime {
        self.held().since
    }

    /// How long this candidate has led.
    pub fn held_for(&self) -> Duration {
        self.held().guard.held_for()
    }

    /// The instant until which leadership is guaranteed ([`LockGuard::guaranteed_until`]).
    pub fn guaranteed_until(&self) -> Instant {
        self.held().guard.guaranteed_until()
    }

    /// Why leadership was lost, or `None` while it is guaranteed.
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.held().guard.lost_reason()
    }

    /// True while leadership is guaranteed: [`Leadership::ensure_held`] as a `bool`, from
    /// memory (no round trip).
    pub fn is_leader(&self) -> bool {
        self.lost_reason().is_none()
    }

    /// `Ok(())` while leadership is guaranteed, otherwise [`Error::Lost`]: no other candidate
    /// can have been elected while this says `Ok`. Call it before an irreversible step (and
    /// still fence the step).
    pub fn ensure_held(&self) -> Result<(), Error> {
        self.held().guard.ensure_held()
    }

    /// Resolves when leadership can no longer be guaranteed, before any other candidate can
    /// be elected ([`LockGuard::lost`]); with [`LossReason::Released`] when this leader
    /// resigns (or its `Leadership` is dropped), before the release is sent. Does not borrow
    /// the leadership.
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        self.held().guard.lost()
    }

    /// A handle on this term for code that does not own the `Leadership` (a task the leader
    /// spawned, a request handler): it asks whether this term still leads, and is told the
    /// moment it does not ([`LeaderWatch`]).
    pub fn watch(&self) -> LeaderWatch {
        LeaderWatch::new(
            self.name().into(),
            self.held().term,
            self.held().guard.lease().clone(),
        )
    }

    /// Changes what followers see of this leader ([`Leader::identity`](super::Leader::identity))
    /// without a new term: observers are woken and see the same term with the new identity
    /// (etcd's `Proclaim`). [`Error::Lost`] if leadership is no longer guaranteed, or the
    /// record was found no longer this leader's; a transient failure is returned as it is (the
    /// followers then still see the identity shown before).
    pub async fn proclaim(&mut self, identity: impl Into<String>) -> Result<(), Error> {
        self.ensure_held()?;
        let identity = identity.into();
        let proclaim = Proclaim {
            identity: identity.clone(),
            mode: ProclaimMode::Value,
            ..self.held().proclaim.clone()
        };
        let held = self.held.as_mut().expect("a Leadership holds its term");
        match proclaim_once(held.guard.hold(), &proclaim).await? {
            Proclaimed { written: true, .. } => {
                held.identity = identity;
                Ok(())
            }
            _ => Err(Error::Lost {
                key: self.name().to_owned(),
                reason: self.lost_reason().unwrap_or(LossReason::Expired),
            }),
        }
    }

    /// The frame a body led under runs in ([`LeaderBuilder::run`](super::LeaderBuilder::run)):
    /// the election's hold, with the term as its token.
    pub(super) fn frame(&self) -> Frame {
        let hold = self.held().guard.hold();
        Frame::new(
            hold.client.identity(),
            (hold.clone(), 0),
            Some(self.held().term),
            self.held().guard.lease().clone(),
        )
    }

    /// Steps down: the next candidate is elected at once (handed the lock by this release).
    /// Belief ends before the release is sent: every [`Leadership::lost`] and [`LeaderWatch`]
    /// of this term says [`LossReason::Released`] by then. `Err(Lost)` if leadership had
    /// already been lost.
    pub async fn resign(mut self) -> Result<(), Error> {
        let Held { guard, leading, .. } = self.held.take().expect("a Leadership holds its term");
        let released = guard.release().await;
        drop(leading);
        released
    }

    fn held(&self) -> &Held {
        self.held.as_ref().expect("a Leadership holds its term")
    }

    /// This leadership, lent to a body of `run`: dropped, it goes to `back` instead of letting
    /// go.
    pub(super) fn lent(mut self, back: Lent) -> Self {
        self.back = Some(back);
        self
    }
}

/// How a campaign runs: what followers will see, the health check it reports to, and the
/// pauses after terms lost as soon as won.
pub(super) struct Campaign {
    pub(super) lock: LockBuilder,
    pub(super) identity: String,
    pub(super) health: Option<LeaderHealth>,
}

/// Campaigns with `lock` until elected, then proclaims the term.
pub(super) async fn campaign(campaign: Campaign) -> Result<Leadership, Error> {
    let Campaign {
        lock,
        identity,
        health,
    } = campaign;
    let lock = lock.fenced(true).renew(true).wait(Duration::MAX).election();
    let candidacy = {
        let client = lock.resolve()?;
        let config = client.config();
        let keep = fence_kept(config.fence_retention, lock.ttl_in(config));
        let keys = LockKeys::new(&config.key_prefix, lock.name())?;
        Candidacy::enter(&client, keys, identity.clone(), keep)
    };
    let mut backoff = Backoff::default();
    loop {
        let guard = match lock.clone().acquire().await {
            Ok(guard) => guard,
            // Too few replicas acknowledged the election (a failover under way, or the new
            // master's replicas not listed yet): that passes by waiting, as a campaign waits.
            Err(error) if passes_by_waiting(&error) => {
                tracing::debug!(name = %lock.name(), %error, "a candidate's election not acknowledged; campaigning again");
                let now = Instant::now();
                tokio::time::sleep_until(backoff.next(now, now + Duration::from_secs(1))).await;
                continue;
            }
            Err(error) => return Err(error),
        };
        let client = guard.hold().client.clone();
        let config = client.config();
        let prefix = config.key_prefix.clone();
        let proclaim = Proclaim {
            token: term_token(&guard),
            identity: identity.clone(),
            retention: fence_kept(config.fence_retention, lock.ttl_in(config)),
            known: memory::known(&prefix, lock.name()),
            exact: 0,
            mode: ProclaimMode::Term,
            wait: client.replica_wait(lock.min_replicas_in(config)),
        };
        let agreed = match proclaim_agreed(&guard, &proclaim).await {
            Ok(Some(p)) => {
                memory::saw(&prefix, lock.name(), p.term);
                // Counted after the lease ran out (the candidate stalled, or the last answer
                // was held up): another candidate may lead by now, with a higher term. The term
                // is remembered (a later one goes above it) and not handed out: as if lost
                // before it was written.
                if guard.ensure_held().is_err() {
                    tracing::debug!(name = %lock.name(), term = p.term, "a term counted after its lease ran out; campaigning again");
                    Ok(None)
                } else {
                    Ok(Some(p))
                }
            }
            other => other,
        };
        match agreed {
            Ok(Some(p)) => {
                let metric = Arc::new(TermMetric {
                    metric: Leading::start(guard.name()),
                    counted: AtomicBool::new(false),
                });
                let keeper = client.spawn_task(keep_record(
                    guard.hold().clone(),
                    Proclaim {
                        exact: p.term,
                        ..proclaim.clone()
                    },
                    guard.lease().clone(),
                    metric.clone(),
                ));
                if let Some(health) = &health {
                    health.started(guard.name(), p.term, guard.lease().clone());
                }
                let leading = Term {
                    metric,
                    lease: guard.lease().clone(),
                    keeper,
                    health,
                    name: lock.name().to_owned(),
                    term: p.term,
                    _candidacy: candidacy,
                };
                return Ok(Leadership {
                    held: Some(Held {
                        guard,
                        term: p.term,
                        since: SystemTime::UNIX_EPOCH + Duration::from_millis(p.since_ms),
                        identity,
                        proclaim: Proclaim {
                            exact: p.term,
                            ..proclaim
                        },
                        leading,
                    }),
                    back: None,
                });
            }
            // Lost before the term was written (or agreed): campaign again, after a pause
            // that grows while it keeps happening.
            Ok(None) => {
                let _ = guard.release().await;
                let now = Instant::now();
                tokio::time::sleep_until(backoff.next(now, now + Duration::from_secs(1))).await;
            }
            Err(error) => {
                let _ = guard.release().await;
                if !passes_by_waiting(&error) {
                    return Err(error);
                }
            }
        }
    }
}

/// An acquire's failure a campaign waits out: too few replicas acknowledging the election (a
/// failover under way), or a transient failure the acquire's own retries did not outlast.
fn passes_by_waiting(error: &Error) -> bool {
    matches!(error, Error::Unreplicated { .. }) || error.is_transient()
}

/// Writes the term of the lock `guard` holds; over a RedLock quorum again with the largest term
/// the masters asked for until a majority wrote the same one ([`AGREEMENT_ROUNDS`] at most).
/// `None` when the lock is no longer this guard's, or the masters did not agree.
async fn proclaim_agreed(
    guard: &LockGuard,
    proclaim: &Proclaim,
) -> Result<Option<Proclaimed>, Error> {
    let mut round = proclaim.clone();
    for _ in 0..AGREEMENT_ROUNDS {
        match proclaim_retrying(guard, &round).await? {
            None => return Ok(None),
            Some(p) if p.written => return Ok(Some(p)),
            Some(p) => round.exact = p.term,
        }
    }
    tracing::debug!(name = %guard.name(), "a leader's term not agreed by a majority of masters; campaigning again");
    Ok(None)
}

/// One proclaim round, retrying transient failures (and too few replicas acknowledging it)
/// while the lock is guaranteed. `None` when the lock is no longer this guard's.
async fn proclaim_retrying(
    guard: &LockGuard,
    proclaim: &Proclaim,
) -> Result<Option<Proclaimed>, Error> {
    let mut backoff = Backoff::default();
    loop {
        match proclaim_acked(guard.hold(), proclaim).await {
            Err(error) if error.is_transient() && guard.ensure_held().is_ok() => {
                let again = backoff.next(Instant::now(), guard.guaranteed_until());
                tokio::time::sleep_until(again).await;
            }
            Err(error) if error.is_transient() => return Ok(None),
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

/// What a term's proclaim writes: its token, the leader's identity, how long the fence floor
/// and the record are kept after it, the highest term known of the name, the term to write
/// (RedLock's agreement), the mode, and the replicas that must acknowledge it.
#[derive(Debug, Clone)]
struct Proclaim {
    token: u64,
    identity: String,
    retention: Duration,
    known: u64,
    exact: u64,
    mode: ProclaimMode,
    wait: Option<ReplicaWait>,
}

/// One `LEADER_PROCLAIM` of `hold`'s term, whose `WAIT` (if any) must be met: too few replicas
/// acknowledging it is a transient failure (the proclaim is tried again while the lease lasts).
async fn proclaim_acked(hold: &Hold, proclaim: &Proclaim) -> Result<Option<Proclaimed>, Error> {
    let client = &hold.client;
    let id = client.new_request_id();
    let call = call_of(hold, proclaim, id.as_bytes());
    let (reply, acked) = client
        .call_acked(Operation::Acquire, hold.key().name(), &call)
        .await?;
    if let (Some(wait), Some(reply)) = (proclaim.wait, reply) {
        if reply.written && acked.unwrap_or(0) < wait.replicas {
            return Err(Error::Timeout {
                op: Operation::Acquire,
                key: hold.key().name().to_owned(),
                after: wait.timeout,
            });
        }
    }
    Ok(reply)
}

/// One `LEADER_PROCLAIM` of the term `hold` owns, as [`Leadership::proclaim`] and the record's
/// keeper send it: `Lost` when the record is no longer this hold's.
async fn proclaim_once(hold: &Hold, proclaim: &Proclaim) -> Result<Proclaimed, Error> {
    let lost = || Error::Lost {
        key: hold.key().name().to_owned(),
        reason: LossReason::Expired,
    };
    proclaim_acked(hold, proclaim).await?.ok_or_else(lost)
}

fn call_of<'a>(hold: &'a Hold, proclaim: &'a Proclaim, id: &'a [u8]) -> ProclaimCall<'a> {
    ProclaimCall {
        keys: hold.key(),
        id,
        value: hold.value.as_bytes(),
        token: proclaim.token,
        identity: &proclaim.identity,
        retention: proclaim.retention,
        sharded: hold.client.publishes_sharded(),
        known: proclaim.known,
        exact: proclaim.exact,
        mode: proclaim.mode,
        wait: proclaim.wait,
    }
}

/// While the term lasts, proclaims it again every third of the retention ([`fence_kept`]), which
/// renews the record's expiry and the fence floor's (`LEADER_PROCLAIM` for its own owner): a
/// leader's record and floor never expire under it, and those of a name no longer elected go a
/// retention after its last leader. Counts the term lost the moment it is (the metric), and
/// ends then, or is aborted when the [`Leadership`] goes; a failed write is tried again at the
/// next period (two more before the record could expire).
async fn keep_record(hold: Hold, proclaim: Proclaim, lease: Arc<Lease>, metric: Arc<TermMetric>) {
    let every = proclaim.retention / 3;
    let lost = lease.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            reason = &mut lost => {
                metric.lost(reason);
                return;
            }
            () = tokio::time::sleep(every) => {}
        }
        match proclaim_once(&hold, &proclaim).await {
            Ok(_) => {}
            // Not this hold's record any more: the lease will say so.
            Err(Error::Lost { .. }) => {}
            Err(error) => {
                tracing::debug!(name = %hold.key().name(), %error, "a leader's record not renewed; trying again next period");
            }
        }
    }
}
