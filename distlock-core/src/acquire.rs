//! Taking a lock: the builder, the acquire/wait loop, and running a body under a lock.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::context::{self, Frame};
use crate::error::{Error, LossReason, Operation};
use crate::guard::{Acquisition, Hold, LockGuard, ReleaseOnDrop, Released};
use crate::keys::LockKeys;
use crate::lease::{check_ttl, deadline_after, guaranteed_until, millis_ceil, Lease, MAX_TTL};
use crate::macro_support::LockSpec;
use crate::registry;
use crate::scripts::{AcquireCall, Acquired, RenewItem};
use crate::waiters::Subscription;
use crate::watchdog::Renewal;

#[derive(Debug, Clone)]
enum ClientChoice {
    Default,
    Named(String),
    Given(Client),
}

/// Builds one lock acquisition; start with [`crate::lock`] or [`Client::lock`].
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
/// println!("fencing token {}", guard.token());
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
    pub(crate) fn from_spec(spec: &LockSpec, name: String) -> Self {
        LockBuilder {
            name,
            client: match spec.client {
                Some(client) => ClientChoice::Named(client.to_owned()),
                None => ClientChoice::Default,
            },
            ttl: spec.ttl,
            renew: spec.renew,
            wait: spec.wait,
            max_hold: None,
            min_hold: spec.min_hold,
        }
    }

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
        let client = self.resolve()?;
        let config = client.config();
        let ttl = self.ttl.unwrap_or(config.default_ttl);
        check_ttl(&format!("the ttl of lock `{}`", self.name), ttl)?;
        if let Some(min) = self.min_hold.filter(|&m| m > MAX_TTL) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "the min_hold of lock `{}` is {min:?}, but it must be at most {MAX_TTL:?} (30 days)",
                    self.name
                ),
            });
        }
        let terms = Terms {
            ttl,
            renew: self.renew,
            wait: self.wait,
            max_hold: self.max_hold.or(config.max_hold),
            min_hold: self.min_hold,
        };
        let keys = Arc::new(LockKeys::new(&config.key_prefix, self.name)?);
        let span =
            tracing::debug_span!("distlock.acquire", key = %keys.name, ttl_ms = millis_ceil(ttl));
        if span.is_disabled() {
            acquire(client, keys, terms).await
        } else {
            acquire(client, keys, terms).instrument(span).await
        }
    }

    /// Runs `body` while holding the lock, then releases it.
    ///
    /// The body sees [`crate::fencing_token`] and re-enters this lock instead of deadlocking.
    ///
    /// Returns `Ok` only if the body ran entirely inside the lease: it completed before the
    /// lease could have run out, no loss was reported while it ran, and the release found the
    /// lock still ours. Otherwise [`Error::Lost`]:
    /// * the lease can no longer be guaranteed while the body runs (renewal found the lock lost,
    ///   Redis stayed unreachable or refused renewal, or without renewal the ttl elapsed): the
    ///   body future is dropped at its next await point;
    /// * the process stalled (a pause, a blocked executor thread) past the lease and the body
    ///   completed afterwards: its output is dropped;
    /// * the lease ran out before the body was first polled: the body never starts;
    /// * the release found the lock expired or held by another owner.
    ///
    /// A release that fails on the network after a body that finished inside its lease still
    /// returns `Ok` (the body did run exclusively); the lock is released in the background or
    /// expires at its ttl.
    pub async fn run<F: Future>(self, body: F) -> Result<F::Output, Error> {
        let guard = self.acquire().await?;
        let hold = guard.hold().clone();
        let frame = Frame::new(
            hold.client.identity(),
            hold.keys.clone(),
            hold.owner.clone(),
            guard.token(),
            guard.lease().clone(),
        );
        let lost = guard.lost();
        // Loss first: a lease that ran out before the body's first poll (or while the
        // executor was blocked) stops the body before it takes another step.
        let outcome = tokio::select! {
            biased;
            reason = lost => Err(reason),
            out = frame.scope(body) => Ok(out),
        };
        let lost = |reason: LossReason| {
            tracing::warn!(key = %hold.keys.name, %reason, "lock lost while the body ran");
            Err(Error::Lost {
                key: hold.keys.name.clone(),
                reason,
            })
        };
        let out = match outcome {
            Ok(out) => out,
            Err(reason) => {
                // Dropping the guard releases whatever is still ours in the background.
                drop(guard);
                return lost(reason);
            }
        };
        // The body may have completed only after a stall past the lease.
        if let Some(reason) = guard.lost_reason() {
            drop(guard);
            return lost(reason);
        }
        match guard.finish().await {
            Ok(Released::Yes) => Ok(out),
            Ok(Released::OtherOwner) => lost(LossReason::Stolen),
            Ok(Released::Absent) => lost(LossReason::Expired),
            Err(Error::Lost { reason, .. }) => lost(reason),
            Err(error) => {
                tracing::warn!(key = %hold.keys.name, %error, "body finished inside its lease but the release failed; the lock expires at its ttl");
                Ok(out)
            }
        }
    }
}

/// The resolved terms of one acquisition.
struct Terms {
    ttl: Duration,
    renew: bool,
    wait: Option<Duration>,
    max_hold: Option<Duration>,
    min_hold: Option<Duration>,
}

async fn acquire(client: Client, keys: Arc<LockKeys>, terms: Terms) -> Result<LockGuard, Error> {
    let started = Instant::now();
    let give_up = terms.wait.map(|w| deadline_after(started, w));
    let outer = context::reentry(client.identity(), &keys.name);
    // Re-entering a hold that is known lost: no round trip can make it ours again.
    if let Some(reason) = outer.as_ref().and_then(|(_, lease)| lease.lost_reason()) {
        return Err(Error::Lost {
            key: keys.name.clone(),
            reason,
        });
    }
    let owner = outer
        .as_ref()
        .map_or_else(|| client.new_owner(), |(owner, _)| owner.clone());
    let hold = Hold {
        client: client.clone(),
        keys: keys.clone(),
        owner,
        hold: client.new_hold(),
        keep_until: None,
    };
    let mut subscription: Option<Subscription> = None;
    // Tasks of this client already wait for the lock: queue behind them instead of barging.
    let mut queue_first = give_up.is_some() && client.has_waiters(&keys.channel);
    loop {
        let mut pttl = 0;
        if !std::mem::take(&mut queue_first) {
            if let Some(sub) = subscription.as_mut() {
                sub.mark_seen();
            }
            // Armed while the script may have run: cancelled or failed here, it is released.
            let mut pending = ReleaseOnDrop::new(hold.clone());
            let sent_at = Instant::now();
            let attempt = try_acquire(&hold, terms.ttl, outer.is_some()).await?;
            pending.disarm();
            // A re-entry that finds the lock gone or taken: the outer hold of this call chain
            // is not in Redis any more.
            let outer_lost = |reason| {
                let lease = &outer.as_ref().expect("only a re-entry is told").1;
                Err(outer_lost(lease, &keys.name, reason))
            };
            match attempt {
                Acquired::Fresh { token } => {
                    return Ok(into_guard(hold, token, false, &terms, sent_at, started))
                }
                Acquired::Reentered { token } => {
                    return Ok(into_guard(hold, token, true, &terms, sent_at, started))
                }
                Acquired::Busy { pttl: left } if outer.is_none() => pttl = left,
                Acquired::Busy { .. } => return outer_lost(LossReason::Stolen),
                Acquired::ReentryGone => return outer_lost(LossReason::Expired),
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
                key: keys.name.clone(),
                waited,
            })
        };
        let Some(give_up) = give_up.filter(|&g| now < g) else {
            return busy();
        };
        match subscription.as_mut() {
            // Subscribed and at the head of the queue: try again at once, the lock may have
            // been released meanwhile.
            None => {
                let sub = subscription.insert(client.subscribe(&keys.channel, &keys.name).await?);
                if !sub.take_turn(give_up).await {
                    return busy();
                }
            }
            Some(sub) => {
                // A holder that crashed never publishes: look again when its lease runs out
                // (a key without expiry, -1, has no lease to wait out).
                let recheck = match u64::try_from(pttl) {
                    Ok(ms) => deadline_after(now, Duration::from_millis(ms.max(1))),
                    Err(_) => now + NO_EXPIRY_RECHECK,
                };
                sub.wait_until(recheck.min(give_up)).await;
            }
        }
    }
}

/// Marks the outer hold of a re-entry lost and returns the error for the re-entry.
fn outer_lost(lease: &Lease, name: &str, reason: LossReason) -> Error {
    if lease.mark_lost(reason) {
        tracing::warn!(key = %name, %reason, "re-entry found the outer hold gone: lock lost");
    }
    Error::Lost {
        key: name.to_owned(),
        reason,
    }
}

fn into_guard(
    mut hold: Hold,
    token: u64,
    reentry: bool,
    terms: &Terms,
    sent_at: Instant,
    started: Instant,
) -> LockGuard {
    let waited_ms = millis_ceil(started.elapsed());
    tracing::debug!(token, reentry, waited_ms, "acquired");
    hold.keep_until = terms.min_hold.map(|min| deadline_after(sent_at, min));
    let lease = Arc::new(Lease::new(
        guaranteed_until(sent_at, terms.ttl),
        terms.renew,
    ));
    let renewal = terms.renew.then(|| {
        hold.client.start_renewal(Renewal {
            item: RenewItem {
                key: hold.keys.lock.as_str().into(),
                owner: hold.owner.clone(),
                ttl: terms.ttl,
            },
            name: hold.keys.name.as_str().into(),
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

/// One acquire round trip (two if the connection dropped). `reentry`: this call chain holds
/// the lock already, so it must not be created afresh.
async fn try_acquire(hold: &Hold, ttl: Duration, reentry: bool) -> Result<Acquired, Error> {
    let call = AcquireCall {
        keys: &hold.keys,
        owner: &hold.owner,
        hold: &hold.hold,
        ttl,
        retention: hold.client.config().fence_retention,
        reentry,
    };
    let name = &hold.keys.name;
    // A dropped connection fails fast and the connection reconnects: retry once, with the same
    // hold field so a reply lost after the script ran is not counted twice. A timeout is not
    // retried (the caller's bound is one response timeout); the caller's cleanup releases the
    // hold in case the script ran.
    match hold.client.call(Operation::Acquire, name, &call).await {
        Err(error) if error.is_connection_failure() => {
            tracing::debug!(%error, "acquire reply lost; retrying with the same hold");
            hold.client.call(Operation::Acquire, name, &call).await
        }
        other => other,
    }
}
