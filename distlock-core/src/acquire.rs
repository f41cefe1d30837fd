//! Taking a lock: the builder, the acquire/wait loop, and running a body under a lock.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::context::{self, Frame};
use crate::error::{Error, Operation};
use crate::guard::{Hold, LockGuard, ReleaseOnDrop};
use crate::keys::LockKeys;
use crate::lease::{guaranteed_until, Lease};
use crate::macro_support::LockSpec;
use crate::registry;
use crate::scripts::ACQUIRE_SCRIPT;
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

enum Attempt {
    Acquired { token: u64, reentry: bool },
    Held { pttl: i64 },
}

impl LockBuilder {
    pub(crate) fn with_client(client: Client, name: String) -> Self {
        LockBuilder {
            client: ClientChoice::Given(client),
            ..lock(name)
        }
    }

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
    /// holder disappears. Default: the client's `default_ttl` (30 s).
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
    /// with [`Error::Busy`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Cap on the total time a renewed lock is held (overrides [`crate::Config::max_hold`]):
    /// renewal stops once the cap is reached and the lock is lost when its lease runs out.
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// Keep the lock at least this long after acquiring it, even if it is released sooner
    /// (ShedLock's `lockAtLeastFor`): an early release leaves the lock to expire when the
    /// minimum is reached instead of deleting it. With `skip` on a job that several replicas
    /// start on slightly different clocks, this stops a fast job from running twice.
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
        let ttl = self.ttl.unwrap_or(client.inner.config.default_ttl);
        if ttl < Duration::from_millis(1) {
            return Err(Error::InvalidConfig {
                reason: format!("lock `{}`: ttl must be at least 1ms", self.name),
            });
        }
        let terms = Terms {
            ttl,
            renew: self.renew,
            wait: self.wait,
            max_hold: self.max_hold.or(client.inner.config.max_hold),
            min_hold: self.min_hold,
        };
        let keys = Arc::new(LockKeys::new(&client.inner.config.key_prefix, self.name)?);
        let span = tracing::debug_span!("distlock.acquire", key = %keys.name, ttl_ms = ttl.as_millis() as u64);
        if span.is_disabled() {
            acquire(client, keys, terms).await
        } else {
            acquire(client, keys, terms).instrument(span).await
        }
    }

    /// Runs `body` while holding the lock, then releases it.
    ///
    /// The body sees [`crate::fencing_token`] and re-enters this lock instead of deadlocking.
    /// If the lease can no longer be guaranteed while it runs (renewal found the lock lost,
    /// Redis stayed unreachable, or without renewal the ttl elapsed), the body future is
    /// dropped at its next await point and [`Error::Lost`] is returned.
    pub async fn run<F: Future>(self, body: F) -> Result<F::Output, Error> {
        let guard = self.acquire().await?;
        let hold = guard.cleanup.hold().expect("fresh guard").clone();
        let frame = Frame::new(
            hold.client.identity(),
            hold.keys.clone(),
            hold.owner.clone(),
            guard.token,
        );
        let lost = guard.lost();
        let outcome = tokio::select! {
            biased;
            out = frame.scope(body) => Ok(out),
            reason = lost => Err(reason),
        };
        match outcome {
            Ok(out) => {
                if let Err(error) = guard.release().await {
                    tracing::warn!(key = %hold.keys.name, %error, "body finished but release failed");
                }
                Ok(out)
            }
            Err(reason) => {
                tracing::warn!(key = %hold.keys.name, %reason, "lock lost while the body ran; body cancelled");
                drop(guard);
                Err(Error::Lost {
                    key: hold.keys.name.clone(),
                    reason,
                })
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
    let give_up = terms.wait.map(|w| started + w);
    let owner =
        context::reentry_owner(client.identity(), &keys.name).unwrap_or_else(|| client.new_owner());
    let hold = Hold {
        client: client.clone(),
        keys: keys.clone(),
        owner,
        hold: client.new_hold(),
        keep_until: None,
    };
    let handle = Handle::current();
    let mut subscription: Option<crate::waiters::Subscription> = None;
    // Tasks of this client already wait for the lock: queue behind them instead of barging.
    let mut queue_first = give_up.is_some() && client.inner.waiters.has_waiters(&keys.channel);
    loop {
        let mut pttl = 0;
        if !std::mem::take(&mut queue_first) {
            if let Some(sub) = subscription.as_mut() {
                sub.mark_seen();
            }
            // Armed while the script may have run: cancelled or failed here, it is released.
            let mut pending = ReleaseOnDrop::new(hold.clone(), handle.clone());
            let sent_at = Instant::now();
            let attempt = try_acquire(&hold, terms.ttl).await?;
            pending.disarm();
            match attempt {
                Attempt::Acquired { token, reentry } => {
                    let guard = into_guard(hold, handle, token, reentry, &terms, sent_at);
                    tracing::debug!(
                        token,
                        reentry,
                        waited_ms = started.elapsed().as_millis() as u64,
                        "acquired"
                    );
                    return Ok(guard);
                }
                Attempt::Held { pttl: left } => pttl = left,
            }
        }
        let now = Instant::now();
        let busy = || {
            let waited = Instant::now() - started;
            tracing::debug!(waited_ms = waited.as_millis() as u64, "busy");
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
                let sub = subscription.insert(
                    client
                        .inner
                        .waiters
                        .subscribe(&keys.channel, &keys.name)
                        .await?,
                );
                if !sub.take_turn(give_up).await {
                    return busy();
                }
            }
            Some(sub) => {
                // A holder that crashed never publishes: look again when its lease runs out.
                let recheck = now + Duration::from_millis(pttl.max(1) as u64);
                sub.wait_until(recheck.min(give_up)).await;
            }
        }
    }
}

fn into_guard(
    mut hold: Hold,
    handle: Handle,
    token: u64,
    reentry: bool,
    terms: &Terms,
    sent_at: Instant,
) -> LockGuard {
    hold.keep_until = terms.min_hold.map(|min| sent_at + min);
    let lease = Arc::new(Lease::new(
        guaranteed_until(sent_at, terms.ttl),
        terms.renew,
    ));
    let renewal = terms.renew.then(|| {
        hold.client.inner.watchdog.register(Renewal {
            key: hold.keys.lock.as_str().into(),
            name: hold.keys.name.as_str().into(),
            owner: hold.owner.clone(),
            ttl: terms.ttl,
            hold_until: terms.max_hold.map(|cap| sent_at + cap),
            lease: lease.clone(),
        })
    });
    LockGuard {
        cleanup: ReleaseOnDrop::new(hold, handle),
        token,
        reentry,
        lease,
        renewal,
        acquired_at: sent_at,
    }
}

/// One acquire round trip (two if the connection dropped).
async fn try_acquire(hold: &Hold, ttl: Duration) -> Result<Attempt, Error> {
    let retention = hold.client.inner.config.fence_retention.max(ttl);
    let mut cmd = ACQUIRE_SCRIPT.evalsha();
    cmd.arg(2)
        .arg(&hold.keys.lock)
        .arg(&hold.keys.fence)
        .arg(&*hold.owner)
        .arg(&*hold.hold)
        .arg(ttl.as_millis() as u64)
        .arg(retention.as_millis() as u64);
    let call = || {
        hold.client.call::<(i64, i64)>(
            Operation::Acquire,
            &hold.keys.name,
            &ACQUIRE_SCRIPT,
            &cmd,
            &hold.hold,
        )
    };
    // A dropped connection fails fast and the connection reconnects: retry once, with the same
    // hold field so a reply lost after the script ran is not counted twice. A timeout is not
    // retried (the caller's bound is one response timeout); the caller's cleanup releases the
    // hold in case the script ran.
    let (status, value) = match call().await {
        Err(error) if error.is_connection_failure() => {
            tracing::debug!(%error, "acquire reply lost; retrying with the same hold");
            call().await?
        }
        other => other?,
    };
    Ok(match status {
        0 => Attempt::Held { pttl: value },
        fresh_or_reentry => Attempt::Acquired {
            token: value as u64,
            reentry: fresh_or_reentry == 2,
        },
    })
}
