//! Taking a lock: the builder, the acquire/wait loop and re-entry (running a body under a lock
//! is `run`'s).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::waiters::Subscription;
use crate::client::watchdog::Renewal;
use crate::client::Client;
use crate::config::{ALL_NEEDS_SENTINEL, ALL_REPLICAS, MAX_REPLICAS};
use crate::deploy::redlock::quorum;
use crate::error::{Error, LossReason, Operation};
use crate::lease::{check_ttl, deadline_after, guaranteed_until, millis_ceil, Lease, MAX_TTL};
use crate::lock::backoff::Backoff;
use crate::lock::context::{self, Outer};
use crate::lock::fence;
use crate::lock::guard::{Acquisition, Hold, LockGuard, ReleaseOnDrop};
use crate::lock::permits::{self, Kind};
use crate::lock::queue::{self, QueueEntry};
use crate::lock::shared;
use crate::metrics::{self, Attempt, Held, Waiting};
use crate::registry;
use crate::wire::calls::{
    AcquireCall, Acquired, FencedAcquireCall, QueuedAcquireCall, RenewCall, RenewItem, Renewed,
    Side,
};
use crate::wire::keys::LockKeys;

#[derive(Debug, Clone)]
enum ClientChoice {
    Default,
    Named(String),
    Given(Client),
}

/// Builds one lock acquisition; start with [`crate::lock()`] or [`Client::lock`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::Error> {
/// use std::time::Duration;
/// let guard = distlock_core::lock("order:42")
///     .ttl(Duration::from_secs(10))
///     .renew(true)
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// assert!(guard.token().is_none()); // only `.fenced(true)` locks hand out a token
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a LockBuilder does nothing until `.acquire()` or `.run(..)` is awaited"]
pub struct LockBuilder {
    name: String,
    client: ClientChoice,
    ttl: Option<Duration>,
    renew: bool,
    wait: Option<Duration>,
    max_hold: Option<Duration>,
    min_hold: Option<Duration>,
    fenced: bool,
    min_replicas: Option<usize>,
    /// The `lock` label of this lock's metrics.
    label: &'static str,
    /// A busy lock skips the body (`skip`): counted as `skipped`, not `busy`.
    skip: bool,
    /// A lock, or one of a semaphore's permits.
    kind: Kind,
    /// `.read()`: a shared hold (checked against the kind when the acquire starts).
    read: bool,
}

/// Starts building a lock on `name` through the default client (see [`crate::init`]).
pub fn lock(name: impl Into<String>) -> LockBuilder {
    LockBuilder {
        name: name.into(),
        client: ClientChoice::Default,
        ttl: None,
        renew: false,
        wait: None,
        max_hold: None,
        min_hold: None,
        fenced: false,
        min_replicas: None,
        label: metrics::UNLABELED,
        skip: false,
        kind: Kind::Mutex,
        read: false,
    }
}

/// How often a waiter looks again at a lock whose key has no expiry (someone created it by
/// hand): such a holder never publishes a release and has no ttl to wait out.
const NO_EXPIRY_RECHECK: Duration = Duration::from_secs(1);

impl Client {
    /// Starts building a lock on `name` through this client.
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder {
            client: ClientChoice::Given(self.clone()),
            ..lock(name)
        }
    }
}

impl LockBuilder {
    /// Lease length: the lock expires this long after acquisition (or the last renewal) if the
    /// holder disappears. Default: the client's `default_ttl` (30 s). Must be between
    /// [`crate::MIN_TTL`] (100 ms) and [`crate::MAX_TTL`] (30 days), or the acquire fails with
    /// [`Error::InvalidConfig`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Renew the lease every ttl/3 while the guard lives (the watchdog). Default: off.
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// Wait up to `wait` for a busy lock (woken by the holder's release). Default: fail at once
    /// with [`Error::Busy`]. `Duration::MAX` waits forever.
    ///
    /// Transient failures do not end the wait ([`Error::is_transient`]: a connection reset or
    /// refused, a response timeout, [`Error::NoQuorum`], a server loading its data or failing
    /// over): the acquire tries again after a pause (15 ms at first, doubling to 200 ms,
    /// randomised), never past the wait. When the wait runs out it returns the last attempt's
    /// answer: [`Error::Busy`] if that found the lock held, otherwise that attempt's error. An
    /// attempt started before the wait runs out is answered first (bounded by the response
    /// timeout). Without `wait` the first failure is returned.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Cap on the total time a renewed lock is held (overrides [`crate::Config::max_hold`]):
    /// renewal stops once the cap is reached and the lock is lost when its lease runs out.
    /// `Duration::MAX` means no cap.
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// Keep the lock at least this long after acquiring it, even if it is released sooner
    /// (ShedLock's `lockAtLeastFor`): an early release leaves the lock to expire when the
    /// minimum is reached instead of deleting it. With `skip` on a job that several replicas
    /// start on slightly different clocks, this stops a fast job from running twice.
    /// At most [`crate::MAX_TTL`] (30 days), or the acquire fails with [`Error::InvalidConfig`].
    pub fn min_hold(mut self, min: Duration) -> Self {
        self.min_hold = Some(min);
        self
    }

    /// Hand out a fencing token with the lock ([`LockGuard::token`], [`crate::fencing_token`]):
    /// strictly greater than every earlier token for this name while its fence floor lives
    /// (see the crate docs on fencing). Default: off.
    ///
    /// The price: a fenced acquire runs a script that reads the server clock and raises the
    /// fence floor (about 8 µs of Redis CPU, and a second key per name for
    /// [`crate::Config::fence_retention`]) where a plain one is a single `SET NX PX GET`
    /// (about 1 µs; see the README's profile).
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// Replicas that must acknowledge the acquire and every renewal of this lock (overrides
    /// [`crate::Config::min_replicas`]; 0: none). Too few acknowledgements within
    /// [`crate::Config::replica_timeout`] release the lock again and fail the acquire with
    /// [`Error::Unreplicated`]; for a renewal they count as a failed renewal (see
    /// [`crate::Config::min_replicas`] for what this buys under failover and what it does not;
    /// over Redis Sentinel, [`crate::ALL_REPLICAS`] waits for every replica a failover could
    /// promote).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock_core::Error> {
    /// let guard = distlock_core::lock("ledger:7").min_replicas(1).acquire().await?;
    /// // The lock is on the master and on at least one replica.
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn min_replicas(mut self, replicas: usize) -> Self {
        self.min_replicas = Some(replicas);
        self
    }

    /// The `lock` label of this lock's metrics (feature `metrics`; without it this does
    /// nothing): a name for the *family* of locks, such as the key template `"order:<id>"`,
    /// never the rendered key (`"order:42"`), so that the number of series stays bounded. It is
    /// `&'static str` for that reason (and so that no label is allocated per call).
    /// `#[distributed_lock]` sets it to the key template as written in the attribute. Default:
    /// `"unlabeled"`.
    ///
    /// ```no_run
    /// # async fn demo(id: u64) -> Result<(), distlock_core::Error> {
    /// let guard = distlock_core::lock(format!("order:{id}")).label("order:<id>").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn label(mut self, label: &'static str) -> Self {
        self.label = label;
        self
    }

    /// A busy lock will skip the caller's work (`#[distributed_lock(skip)]`): the acquire
    /// counts as `skipped` rather than `busy` in the metrics. Nothing else changes.
    pub(crate) fn skipping(mut self) -> Self {
        self.skip = true;
        self
    }

    /// Takes one of a semaphore's permits instead of the lock (see [`crate::semaphore`]).
    pub(crate) fn with_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// A shared (read) hold (see [`LockBuilder::read`]).
    pub(crate) fn reading(mut self) -> Self {
        self.read = true;
        self
    }

    /// Use the client installed under `name` with [`crate::Config::install_as`].
    pub fn client(mut self, name: impl Into<String>) -> Self {
        self.client = ClientChoice::Named(name.into());
        self
    }

    fn resolve(&self) -> Result<Client, Error> {
        match &self.client {
            ClientChoice::Default => registry::get(None),
            ClientChoice::Named(name) => registry::get(Some(name)),
            ClientChoice::Given(client) => Ok(client.clone()),
        }
    }

    /// Acquires the lock.
    ///
    /// Inside a body run under the same lock (same name, same client) this re-enters: the hold
    /// count goes up and the guard shares the outer token. Dropping this future at any point
    /// never leaves the lock held: a possibly applied acquisition is released in the background.
    pub async fn acquire(self) -> Result<LockGuard, Error> {
        let attempt = Attempt::new(self.label, self.skip, self.wait.is_some());
        let result = match self.terms() {
            Ok((client, keys, terms)) => {
                let span = tracing::debug_span!("distlock.acquire", key = %keys.name(), ttl_ms = millis_ceil(terms.ttl));
                if span.is_disabled() {
                    acquire(client, keys, terms).await
                } else {
                    acquire(client, keys, terms).instrument(span).await
                }
            }
            Err(error) => Err(error),
        };
        attempt.done(result.as_ref().map(LockGuard::is_reentry));
        result
    }

    /// The client, the key layout and the checked terms of this acquisition.
    fn terms(&self) -> Result<(Client, LockKeys, Terms), Error> {
        let client = self.resolve()?;
        let config = client.config();
        let ttl = self.ttl.unwrap_or(config.default_ttl);
        check_ttl(|| format!("the ttl of lock `{}`", self.name), ttl)?;
        if let Some(min) = self.min_hold.filter(|&m| m > MAX_TTL) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "the min_hold of lock `{}` is {min:?}, but it must be at most {MAX_TTL:?} (30 days)",
                    self.name
                ),
            });
        }
        let min_replicas = self.min_replicas.unwrap_or(config.min_replicas);
        if min_replicas == ALL_REPLICAS && config.sentinels.is_empty() {
            return Err(Error::InvalidConfig {
                reason: format!("lock `{}`: {ALL_NEEDS_SENTINEL}", self.name),
            });
        }
        if min_replicas > MAX_REPLICAS && min_replicas != ALL_REPLICAS {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "the min_replicas of lock `{}` is {min_replicas}, but it must be at most {MAX_REPLICAS}",
                    self.name
                ),
            });
        }
        if min_replicas > 0 && client.is_quorum() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "lock `{}` asks for min_replicas, which does not apply to `Config::redlock` (its masters have no replicas to wait for)",
                    self.name
                ),
            });
        }
        let kind = match self.read {
            true => shared::read_kind(&self.name, self.kind)?,
            false => self.kind,
        };
        permits::check(&self.name, kind)?;
        let terms = Terms {
            kind,
            ttl,
            renew: self.renew,
            wait: self.wait,
            max_hold: self.max_hold.or(config.max_hold),
            min_hold: self.min_hold,
            fenced: self.fenced,
            min_replicas,
            label: self.label,
        };
        let keys = LockKeys::new(&config.key_prefix, &self.name)?;
        Ok((client, keys, terms))
    }
}

/// The resolved terms of one acquisition.
pub(crate) struct Terms {
    pub(crate) kind: Kind,
    pub(crate) ttl: Duration,
    renew: bool,
    wait: Option<Duration>,
    max_hold: Option<Duration>,
    min_hold: Option<Duration>,
    pub(crate) fenced: bool,
    /// Replicas that must acknowledge the acquire and each renewal (0: none).
    min_replicas: usize,
    /// The `lock` label of the metrics.
    label: &'static str,
}

async fn acquire(client: Client, keys: LockKeys, terms: Terms) -> Result<LockGuard, Error> {
    let started = Instant::now();
    if let Some(outer) = context::reentry(client.identity(), keys.name()) {
        return reenter(outer, &terms, started).await;
    }
    let give_up = terms.wait.map(|w| deadline_after(started, w));
    let owner = client.new_owner();
    let hold = Hold::new(client.clone(), keys, owner, terms.kind);
    let keys = &hold.keys;
    let mut subscription: Option<Subscription> = None;
    let mut waiting = Waiting::default();
    // Tasks of this client already wait for the lock: queue behind them instead of barging.
    let mut queue_first = give_up.is_some() && client.has_waiters(keys.channel());
    // The last attempt's transient failure (a reset or timed-out connection, `NoQuorum`, a
    // server loading or failing over), if it failed so: what the waiter is told when its wait
    // runs out, and the reason to pause (`backoff`) instead of waiting for a release.
    let mut failed: Option<Error> = None;
    let mut backoff = Backoff::default();
    // Armed from the first attempt that failed transiently on one server until the lock is
    // taken: that request may still take the lock (its reply lost, or it arrives late). A later
    // attempt (same value) reads such a take as its own; giving up, or being dropped, releases
    // it in the background (owner-checked: another owner's lock is left alone).
    let mut unanswered: Option<ReleaseOnDrop> = None;
    // RedLock: a waiter's place in the masters' queues (0: it does not wait, or it takes a
    // permit or a read hold, which retry without a queue: see `permits`), and its entry
    // there once it queued (from its first attempt after subscribing: an acquire that takes
    // the lock at once never queues), taken out again when the acquire ends.
    let ticket = match client.is_quorum() && give_up.is_some() && hold.kind == Kind::Mutex {
        true => queue::ticket(),
        false => 0,
    };
    let mut queued: Option<QueueEntry> = None;
    // A write that met readers: this and every later attempt goes as `ACQUIRE_WRITE`.
    let mut met_readers = false;
    loop {
        let mut pttl = None;
        // RedLock: release wakes to let pass (the waiters queued ahead take those turns).
        let mut pass_wakes = 0;
        if !std::mem::take(&mut queue_first) {
            if let Some(sub) = subscription.as_mut() {
                sub.mark_seen();
            }
            // Armed while the request may have been applied: cancelled or failed here, the lock
            // is released in the background.
            let unanswered_before = unanswered.is_some();
            let mut pending = unanswered
                .take()
                .unwrap_or_else(|| ReleaseOnDrop::new(hold.clone()));
            let queue = ticket > 0 && subscription.is_some();
            if queue {
                queued.get_or_insert_with(|| QueueEntry::new(hold.clone()));
            }
            let sent_at = Instant::now();
            let switches = client.switches();
            let (attempt, acked) =
                match try_acquire(&hold, &terms, (ticket, queue), &mut met_readers).await {
                    // A waiter tries again, after a pause, until its wait runs out. (RedLock's
                    // `NoQuorum` included: a split vote, masters that did not answer.)
                    Err(error) if give_up.is_some() && error.is_transient() => {
                        failed = Some(error);
                        (
                            Acquired::Busy {
                                pttl: None,
                                pass: 0,
                            },
                            None,
                        )
                    }
                    other => {
                        failed = None;
                        other?
                    }
                };
            let attempt = match attempt {
                // RedLock: a token above every earlier holder's (failing, the lock is released).
                Acquired::Taken { token: Some(taken) } if client.is_quorum() => Acquired::Taken {
                    token: Some(fence::token(&client, keys, taken, terms.ttl, sent_at).await?),
                },
                other => other,
            };
            if client.is_quorum() && !matches!(attempt, Acquired::Taken { .. }) {
                // A minority of the RedLock masters may have granted it: release it there
                // before anything else (a later attempt reuses the value).
                if let Err(error) = hold.release(None).await {
                    tracing::debug!(%error, "release after a RedLock attempt without a majority failed");
                }
            }
            let stale = failed.is_some() || unanswered_before;
            if stale && !client.is_quorum() && !matches!(attempt, Acquired::Taken { .. }) {
                unanswered = Some(pending);
            } else {
                pending.disarm();
            }
            match attempt {
                Acquired::Taken { .. } if acked.is_some_and(|(n, required)| n < required) => {
                    let (n, required) = acked.unwrap_or_default();
                    return Err(unreplicated(hold, n, required).await);
                }
                Acquired::Taken { token } => {
                    waiting.acquired(started);
                    return Ok(into_guard(
                        hold,
                        token,
                        false,
                        &terms,
                        (sent_at, switches),
                        started,
                    ));
                }
                Acquired::Busy { pttl: left, pass } => {
                    pttl = left;
                    pass_wakes = pass;
                }
                Acquired::Incompatible => {
                    return Err(Error::Incompatible {
                        key: keys.name().to_owned(),
                    })
                }
            }
        }
        let now = Instant::now();
        let busy = || {
            // Without `wait` the caller did not wait, whatever the round trip took.
            let waited = match terms.wait {
                Some(_) => Instant::now() - started,
                None => Duration::ZERO,
            };
            tracing::debug!(waited_ms = millis_ceil(waited), "busy");
            Err(Error::Busy {
                key: keys.name().to_owned(),
                waited,
                held_by: permits::held_by(terms.kind, met_readers),
            })
        };
        let Some(give_up) = give_up.filter(|&g| now < g) else {
            return match failed {
                Some(error) => Err(error),
                None => busy(),
            };
        };
        if let Some(error) = &failed {
            pause(&mut backoff, error, terms.label, now, give_up).await;
            continue;
        }
        backoff.reset();
        match subscription.as_mut() {
            // Subscribed and at the head of the queue: try again at once, the lock may have
            // been released meanwhile.
            None => {
                let sub = match client.subscribe(keys.channel(), keys.name()).await {
                    Ok(sub) => subscription.insert(sub),
                    Err(error) if error.is_transient() => {
                        pause(&mut backoff, &error, terms.label, Instant::now(), give_up).await;
                        failed = Some(error);
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                waiting.start(terms.label);
                if !sub.take_turn(give_up).await {
                    return busy();
                }
            }
            Some(sub) => {
                // A holder that crashed never publishes: look again when its lease runs out
                // (a key without expiry, -1, has no lease to wait out).
                let recheck = match pttl.and_then(|ms| u64::try_from(ms).ok()) {
                    Some(ms) => deadline_after(now, Duration::from_millis(ms.max(1))),
                    None => now + NO_EXPIRY_RECHECK,
                };
                sub.wait_until(recheck.min(give_up), pass_wakes).await;
            }
        }
    }
}

/// A waiter's pause after an attempt (or a subscription) that failed with a transient error:
/// the next attempt is made when it ends, if the wait has not run out by then.
async fn pause(
    backoff: &mut Backoff,
    error: &Error,
    label: &'static str,
    now: Instant,
    give_up: Instant,
) {
    metrics::acquire_retry(label);
    let retry_at = backoff.next(now, give_up);
    tracing::debug!(%error, retry_in_ms = millis_ceil(retry_at - now), "acquire failed transiently; retrying within the wait");
    tokio::time::sleep_until(retry_at).await;
}

/// A take that too few replicas acknowledged: released again (in the background if the
/// release cannot be answered now), and the error that says how many did.
async fn unreplicated(hold: Hold, acknowledged: usize, required: usize) -> Error {
    let key = hold.keys.name().to_owned();
    tracing::warn!(%key, acknowledged, required, "too few replicas acknowledged the lock; releasing it");
    // Armed until the release is answered: cancelled or failed, it runs in the background.
    let mut pending = ReleaseOnDrop::new(hold.clone());
    match hold.release(None).await {
        Ok(_) => drop(pending.disarm()),
        Err(error) => {
            tracing::debug!(%key, %error, "release of an unacknowledged lock failed; retrying in the background")
        }
    }
    Error::Unreplicated {
        key,
        acknowledged,
        required,
    }
}

/// Re-enters a lock this call chain holds: no hold is written to Redis (holds are counted on
/// the client), but one round trip checks that the outer hold is still ours and makes the
/// key's expiry reach at least this hold's ttl (never shortening it). If the outer hold is
/// gone the re-entry fails with [`Error::Lost`] and the outer hold is marked lost too: a lost
/// lock is never re-created under its old owner.
async fn reenter(outer: Outer, terms: &Terms, started: Instant) -> Result<LockGuard, Error> {
    let name = outer.hold.keys.name();
    permits::check_reentry(name, outer.hold.kind, terms.kind)?;
    // Re-entering a hold that is known lost: no round trip can make it ours again.
    if let Some(reason) = outer.lease.lost_reason() {
        return Err(Error::Lost {
            key: name.to_owned(),
            reason,
        });
    }
    if terms.fenced && outer.token.is_none() {
        return Err(Error::InvalidConfig {
            reason: format!("lock `{name}` is re-entered with `fenced`, but its outer hold was taken without a fencing token: fence the outer lock too"),
        });
    }
    let client = &outer.hold.client;
    let items = [RenewItem {
        key: outer.hold.keys.lock().into(),
        value: outer.hold.value.as_str().into(),
        ttl: terms.ttl,
        permits: outer.hold.kind.permits(),
    }];
    let id = client.new_request_id();
    let call = RenewCall {
        id: id.as_bytes(),
        items: &items,
        wait: client.replica_wait(terms.min_replicas),
    };
    // What the `WAIT` requires (`ALL_REPLICAS` resolved as it is sent).
    let required = call.wait.map_or(0, |w| w.replicas);
    let sent_at = Instant::now();
    let switches = client.switches();
    // The check changes nothing but the expiry (only ever later), so it is safe to repeat.
    let (found, acked) = match client.call_acked(Operation::Acquire, name, &call).await {
        Err(error) if error.is_connection_failure() => {
            tracing::debug!(%error, "re-entry check reply lost; retrying");
            client.call_acked(Operation::Acquire, name, &call).await?
        }
        other => other?,
    };
    let reason = match found.first() {
        // The outer hold stays as it was (its own acquire was acknowledged); only this
        // extension is not durable enough.
        Some(Renewed::Yes) if acked.unwrap_or(0) < required => {
            return Err(Error::Unreplicated {
                key: name.to_owned(),
                acknowledged: acked.unwrap_or(0),
                required,
            });
        }
        Some(Renewed::Yes) => {
            let hold = outer.hold.enter();
            return Ok(into_guard(
                hold,
                outer.token,
                true,
                terms,
                (sent_at, switches),
                started,
            ));
        }
        Some(Renewed::Gone) | None => LossReason::Expired,
        Some(Renewed::OtherOwner | Renewed::NotALock) => LossReason::Stolen,
        // Only a batch of several locks settles with an undecided one (one lock fails the
        // call as `NoQuorum` instead); the same error here, the outer hold as it was.
        Some(Renewed::Undecided) => {
            return Err(Error::NoQuorum {
                op: Operation::Acquire,
                key: name.to_owned(),
                agreed: 0,
                required: quorum::majority(client.quorum_size()),
            })
        }
    };
    if outer.lease.mark_lost(reason) {
        tracing::warn!(key = %name, %reason, "re-entry found the outer hold gone: lock lost");
    }
    Err(Error::Lost {
        key: name.to_owned(),
        reason,
    })
}

fn into_guard(
    hold: Hold,
    token: Option<u64>,
    reentry: bool,
    terms: &Terms,
    (sent_at, switches): (Instant, u64),
    started: Instant,
) -> LockGuard {
    let waited_ms = millis_ceil(started.elapsed());
    tracing::debug!(?token, reentry, waited_ms, "acquired");
    if let (false, Some(min)) = (reentry, terms.min_hold) {
        hold.keep_until(deadline_after(sent_at, min));
    }
    let lease = Arc::new(Lease::new(
        guaranteed_until(sent_at, terms.ttl),
        terms.renew,
        Held::new(terms.label, !reentry),
    ));
    // Where masters switch (Sentinel) or server clocks are watched for steps, every outermost
    // lease is also confirmed on the server after a switch or a step (see `watchdog`).
    let confirm = !reentry && hold.client.follows_switches();
    let renewal = (terms.renew || confirm).then(|| {
        hold.client.start_renewal(Renewal {
            item: RenewItem {
                key: hold.keys.lock().into(),
                value: hold.value.as_str().into(),
                ttl: terms.ttl,
                permits: hold.kind.permits(),
            },
            renew: terms.renew,
            switches,
            name: hold.keys.name().into(),
            replicas: terms.min_replicas,
            hold_until: terms.max_hold.map(|cap| deadline_after(sent_at, cap)),
            lease: lease.clone(),
        })
    });
    LockGuard::new(Acquisition {
        hold,
        token,
        reentry,
        lease,
        renewal,
        acquired_at: sent_at,
    })
}

/// One acquire round trip (two if the connection dropped): a plain `SET NX PX GET`, or the
/// fenced script, with the `WAIT` of `min_replicas`; over a RedLock quorum the queued script
/// (plain or fenced), with the waiter's `ticket` (and whether to queue it); a permit's or a
/// read hold's own script; a write that meets readers (or met them in an earlier attempt,
/// `met_readers`) is sent (again) as `ACQUIRE_WRITE` (see `shared`). `terms.wait`: the
/// caller waits when the lock is busy, so ask for its ttl too. Returns what it found and, when
/// replicas were asked for, how many acknowledged and how many the `WAIT` required
/// (`ALL_REPLICAS` resolved).
async fn try_acquire(
    hold: &Hold,
    terms: &Terms,
    queued: (u64, bool),
    met_readers: &mut bool,
) -> Result<(Acquired, Option<(usize, usize)>), Error> {
    let client = &hold.client;
    let replicas = client.replica_wait(terms.min_replicas);
    let readers = *met_readers;
    let id = client.new_request_id();
    let mut found = send_acquire(hold, terms, queued, id.as_bytes(), readers).await?;
    // A write whose plain or fenced acquire met a key that is not a string (readers, maybe):
    // asked again, and from now on, as a write where readers may hold the lock.
    if terms.kind == Kind::Mutex && !readers && found.0 == Acquired::Incompatible {
        *met_readers = true;
        let id = client.new_request_id();
        found = send_acquire(hold, terms, queued, id.as_bytes(), true).await?;
    }
    let (found, acked) = found;
    let required = replicas.map_or(0, |w| w.replicas);
    Ok((found, replicas.map(|_| (acked.unwrap_or(0), required))))
}

/// One acquire request of [`try_acquire`] (`readers`: a write that met readers, see
/// `shared`), retried once with the same request if the connection dropped.
async fn send_acquire(
    hold: &Hold,
    terms: &Terms,
    (ticket, queue): (u64, bool),
    id: &[u8],
    readers: bool,
) -> Result<(Acquired, Option<usize>), Error> {
    let client = &hold.client;
    let name = hold.keys.name();
    let replicas = client.replica_wait(terms.min_replicas);
    let send = || async {
        if let Kind::Permits(permits) = terms.kind {
            permits::try_acquire(hold, terms, permits, (id, replicas)).await
        } else if terms.kind == Kind::Read {
            shared::try_acquire(hold, terms, Side::Read, (id, replicas)).await
        } else if readers {
            let write = Side::Write {
                waits: terms.wait.is_some(),
            };
            shared::try_acquire(hold, terms, write, (id, replicas)).await
        } else if client.is_quorum() {
            let call = QueuedAcquireCall {
                keys: &hold.keys,
                value: hold.value.as_bytes(),
                id,
                ttl: terms.ttl,
                fenced: terms.fenced.then_some(client.config().fence_retention),
                ticket,
                queue,
            };
            client.call_acked(Operation::Acquire, name, &call).await
        } else if terms.fenced {
            let call = FencedAcquireCall {
                keys: &hold.keys,
                value: hold.value.as_bytes(),
                id,
                ttl: terms.ttl,
                retention: client.config().fence_retention,
                wait: replicas,
            };
            client.call_acked(Operation::Acquire, name, &call).await
        } else {
            let call = AcquireCall {
                keys: &hold.keys,
                owner: &hold.value,
                id,
                ttl: terms.ttl,
                want_pttl: terms.wait.is_some(),
                wait: replicas,
            };
            client.take(name, &call).await
        }
    };
    // A dropped connection fails fast and the connection reconnects: retry once, with the same
    // value so a reply lost after the lock was taken reads as our own take. A timeout is not
    // retried (the caller's bound is one response timeout); the caller's cleanup releases the
    // lock in case the request was applied.
    match send().await {
        Err(error) if error.is_connection_failure() => {
            tracing::debug!(%error, "acquire reply lost; retrying with the same value");
            send().await
        }
        other => other,
    }
}
