//! A liveness check of this process's leadership: unhealthy while a leader keeps acting past its
//! lease (client-go's `HealthzAdaptor`).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LossReason;
use crate::lease::Lease;
use crate::sync;

/// A health check for a liveness probe: unhealthy while a term this process led was lost more
/// than a grace period ago and its [`Leadership`](super::Leadership) still exists — a leader
/// that keeps acting past its lease. That happens when a leader's body does not yield (a
/// blocking call, a busy loop: [`LeaderBuilder::run`](super::LeaderBuilder::run) can only cancel
/// a body at an `.await`), or when a [`campaign`](super::LeaderBuilder::campaign) caller never
/// looks at [`Leadership::lost`](super::Leadership::lost). Restarting such a process is the
/// remedy, as client-go's leader election applies it.
///
/// Give it to the elections it watches ([`LeaderBuilder::health`](super::LeaderBuilder::health));
/// ask [`LeaderHealth::check`] from the probe. Healthy while not leading, while leading, and
/// after a resign.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::Error> {
/// use std::time::Duration;
/// use distlock_core::leader::LeaderHealth;
///
/// let health = LeaderHealth::new(Duration::from_secs(2));
/// let probe = health.clone();
/// // In an axum service:
/// // .route("/livez", get(move || {
/// //     let probe = probe.clone();
/// //     async move { probe.check().map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string())) }
/// // }))
/// # let _ = probe;
/// distlock_core::leader("scheduler")
///     .health(&health)
///     .run(|leadership| async move { /* ... */ drop(leadership) })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderHealth {
    inner: Arc<Inner>,
}

struct Inner {
    grace: Duration,
    /// The terms this process leads now (one per election watched), with their leases.
    terms: Mutex<Vec<Led>>,
}

struct Led {
    name: String,
    term: u64,
    lease: Arc<Lease>,
}

/// A leader acting past its lease: what [`LeaderHealth::check`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overdue {
    /// The election.
    pub name: String,
    /// The term lost.
    pub term: u64,
    /// Why it was lost.
    pub reason: LossReason,
    /// How long ago it was lost, with its `Leadership` still alive.
    pub past_lease: Duration,
}

impl fmt::Display for Overdue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "leader of `{}` (term {}) still acting {:?} after its term was lost ({}): its body does not yield to be cancelled, or its Leadership is kept past lost()",
            self.name, self.term, self.past_lease, self.reason
        )
    }
}

impl std::error::Error for Overdue {}

impl LeaderHealth {
    /// A check that reports a leader still acting `grace` after its term was lost. A grace of a
    /// few seconds covers a body that is between two `.await`s when the loss comes.
    pub fn new(grace: Duration) -> Self {
        LeaderHealth {
            inner: Arc::new(Inner {
                grace,
                terms: Mutex::default(),
            }),
        }
    }

    /// `Ok(())` unless a term this process led was lost more than the grace period ago and its
    /// `Leadership` still exists; then the first such term.
    pub fn check(&self) -> Result<(), Overdue> {
        let now = Instant::now();
        let terms = sync::lock(&self.inner.terms);
        for led in terms.iter() {
            let (Some(reason), Some(at)) = (led.lease.lost_reason(), led.lease.lost_at()) else {
                continue;
            };
            let past_lease = now.saturating_duration_since(at);
            if reason != LossReason::Released && past_lease > self.inner.grace {
                return Err(Overdue {
                    name: led.name.clone(),
                    term: led.term,
                    reason,
                    past_lease,
                });
            }
        }
        Ok(())
    }

    /// A term of `name` starts, with its lease.
    pub(super) fn started(&self, name: &str, term: u64, lease: Arc<Lease>) {
        sync::lock(&self.inner.terms).push(Led {
            name: name.to_owned(),
            term,
            lease,
        });
    }

    /// The term `term` of `name` ended (its `Leadership` went).
    pub(super) fn ended(&self, name: &str, term: u64) {
        sync::lock(&self.inner.terms).retain(|led| led.term != term || led.name != name);
    }
}

impl fmt::Debug for LeaderHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderHealth")
            .field("grace", &self.inner.grace)
            .field("healthy", &self.check().is_ok())
            .finish()
    }
}
