//! Lock metrics (feature `metrics`): every series the runtime emits, through the `metrics`
//! facade, and nothing else. The rest of the runtime calls these hooks in one line each.
//!
//! Without the feature every function here is empty and every type is zero-sized: the hot path
//! pays no allocation, no clock read and no atomic for metrics. With it, each hook is one
//! facade call with `&'static str` labels: no `String` is made for a label, but the facade
//! builds (and hashes) a key with a small label list per call, whatever the recorder (about 2k
//! instructions per acquire + release, measured with callgrind on benchmark B1 and no recorder).
//!
//! The `lock` label is the lock's *label* ([`crate::LockBuilder::label`]): the key template
//! for `#[distributed_lock]` (`order:<id>`), or what the manual API passes, by default
//! [`UNLABELED`], and a leader election's name for its lock ([`election_label`]); never the
//! rendered key, so the number of series stays bounded. Every series with a `lock` label also
//! has a `kind` label: what the acquisition takes (`lock`, `permit`, `read`, `set` or
//! `leader`, see [`Labels`]).
//!
//! What an operator alerts on needs a few series that no single event gives: how late renewals
//! come ([`RENEWAL_MARGIN_RATIO`]), how long a renewed hold has lasted in ttls
//! ([`HOLD_TTL_RATIO`]), and what the client saw happen to its servers
//! ([`SERVER_EVENTS_TOTAL`]); the rules and alerts over all of them are in the repository's
//! `ops/` folder.

#![cfg_attr(not(feature = "metrics"), allow(unused_variables, dead_code))]

#[cfg(feature = "metrics")]
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, LossReason};

/// The `lock` label of a lock built without [`crate::LockBuilder::label`].
pub(crate) const UNLABELED: &str = "unlabeled";

/// The `kind` label of a leader election's lock: a hold meant to last as long as its process
/// runs, which the operator's kit watches through the election's own alerts rather than the
/// alerts on stuck or lost holds.
pub(crate) const LEADER_KIND: &str = "leader";

/// The election names given a `lock` label so far ([`election_label`]).
static ELECTIONS: std::sync::LazyLock<std::sync::RwLock<std::collections::HashSet<&'static str>>> =
    std::sync::LazyLock::new(Default::default);

/// The `lock` label of the leader election `name`'s lock: the name itself. An election's name
/// is a fixed name the developer chose, as a key template is (not data: one per order), so it
/// bounds the series as a template does. A label is `&'static str` (no allocation per call):
/// each distinct name is kept once for the life of the process, as its series are by the
/// recorder. Compiled without the feature too: the acquire span's `lock.template` is the label.
pub(crate) fn election_label(name: &str) -> &'static str {
    if let Some(label) = crate::sync::read(&ELECTIONS).get(name) {
        return label;
    }
    let mut names = crate::sync::write(&ELECTIONS);
    if let Some(label) = names.get(name) {
        return label;
    }
    let label: &'static str = Box::leak(name.into());
    names.insert(label);
    label
}

/// The labels of one acquisition's series: `lock` (its label) and `kind`, what it takes —
/// `lock` (the lock itself, the write of a read/write lock), `permit` (one of a semaphore's),
/// `read` (a shared hold), `set` (several locks at once, `lock_all`) or `leader` (a leader
/// election's lock, [`LEADER_KIND`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Labels {
    pub(crate) lock: &'static str,
    pub(crate) kind: &'static str,
}

/// `distlock_acquire_total{lock, kind, outcome}`: acquire calls, by how they ended.
pub(crate) const ACQUIRE_TOTAL: &str = "distlock_acquire_total";
/// `distlock_acquire_retries_total{lock, kind}`: transient failures that a waiting acquire retried.
pub(crate) const ACQUIRE_RETRIES_TOTAL: &str = "distlock_acquire_retries_total";
/// `distlock_wait_seconds{lock, kind}`: from the call to the acquire, for acquires that waited.
pub(crate) const WAIT_SECONDS: &str = "distlock_wait_seconds";
/// `distlock_hold_seconds{lock, kind}`: from the acquire to the release (or drop) of the guard.
pub(crate) const HOLD_SECONDS: &str = "distlock_hold_seconds";
/// `distlock_lost_total{lock, kind, reason}`: held locks that were lost.
pub(crate) const LOST_TOTAL: &str = "distlock_lost_total";
/// `distlock_renewals_total{outcome}`: lease renewals, by result.
pub(crate) const RENEWALS_TOTAL: &str = "distlock_renewals_total";
/// `distlock_renewal_batch_size`: leases per renewal round trip.
pub(crate) const RENEWAL_BATCH_SIZE: &str = "distlock_renewal_batch_size";
/// `distlock_sent_releases_total{lock, kind, outcome}`: releases sent without waiting (`run`), by
/// what their confirmation found.
pub(crate) const SENT_RELEASES_TOTAL: &str = "distlock_sent_releases_total";
/// `distlock_held{lock, kind}`: locks held now.
pub(crate) const HELD: &str = "distlock_held";
/// `distlock_waiting{lock, kind}`: acquire calls waiting for a busy lock now.
pub(crate) const WAITING: &str = "distlock_waiting";
/// `distlock_renewal_margin_ratio{lock, kind}`: the part of its ttl a renewed lease had left when
/// a renewal of it was answered (about 2/3 when renewals are on time; near 0, the lease is about
/// to be lost).
pub(crate) const RENEWAL_MARGIN_RATIO: &str = "distlock_renewal_margin_ratio";
/// `distlock_hold_ttl_ratio{lock, kind}`: a renewed hold's age in ttls, at each of its renewals.
pub(crate) const HOLD_TTL_RATIO: &str = "distlock_hold_ttl_ratio";
/// `distlock_server_events_total{event}`: what the client saw happen to its servers (`event` =
/// `clock_step`, `restart`, `master_switch`; see [`ServerEvent`]).
pub(crate) const SERVER_EVENTS_TOTAL: &str = "distlock_server_events_total";
/// `distlock_leader{name}`: 1 while this process leads the election `name`.
pub(crate) const LEADER: &str = "distlock_leader";
/// `distlock_leader_terms_total{name}`: terms this process started.
pub(crate) const LEADER_TERMS_TOTAL: &str = "distlock_leader_terms_total";
/// `distlock_leader_lost_total{name, reason}`: terms of this process that ended lost.
pub(crate) const LEADER_LOST_TOTAL: &str = "distlock_leader_lost_total";

/// Waits and holds in seconds, 1 ms to 5 min: [`HISTOGRAM_BUCKETS`]' `_seconds` buckets.
#[cfg(feature = "metrics")]
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The bucket boundaries of every distlock histogram, by metric name: the buckets the
/// operator's kit (`ops/`: recording rules, alerts, dashboard) reads. Give them to your
/// exporter; without buckets `metrics-exporter-prometheus` renders summaries, which cannot be
/// summed across processes and which the kit's rules do not read.
///
/// ```ignore
/// use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
///
/// let mut builder = PrometheusBuilder::new();
/// for (name, buckets) in distlock::HISTOGRAM_BUCKETS {
///     builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
/// }
/// ```
///
/// `distlock_hold_ttl_ratio` keeps a boundary at 100 and one above it: the alert on holds past
/// 100 ttls reads them (`histogram_quantile(1, …)`).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub const HISTOGRAM_BUCKETS: [(&str, &[f64]); 5] = [
    (WAIT_SECONDS, SECONDS_BUCKETS),
    (HOLD_SECONDS, SECONDS_BUCKETS),
    // The part of its ttl a lease had left at a renewal: about 2/3 on time.
    (
        RENEWAL_MARGIN_RATIO,
        &[0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    ),
    // A renewed hold's age in ttls.
    (
        HOLD_TTL_RATIO,
        &[1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0],
    ),
    (
        RENEWAL_BATCH_SIZE,
        &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0],
    ),
];

/// Registers the unit and a description of every distlock metric with the installed recorder
/// (exporters show them: Prometheus' `# HELP` lines). Optional: the metrics are recorded
/// without it. Call it after installing the recorder.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        ACQUIRE_TOTAL,
        Unit::Count,
        "Lock acquire calls by lock label, kind (lock, permit, read, set, leader) and outcome (acquired, reentered, busy, skipped, timeout, error)."
    );
    describe_counter!(
        ACQUIRE_RETRIES_TOTAL,
        Unit::Count,
        "Transient failures (a reset connection, a timeout, NoQuorum, a failover) that waiting acquires retried, by lock label and kind."
    );
    describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from the acquire call to the lock, for acquires that waited for a busy lock."
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "Time from acquiring a lock to releasing (or dropping) its guard."
    );
    describe_counter!(
        LOST_TOTAL,
        Unit::Count,
        "Held locks that were lost, by lock label, kind and reason."
    );
    describe_counter!(
        RENEWALS_TOTAL,
        Unit::Count,
        "Lease renewals by outcome (ok, failed, lost)."
    );
    describe_histogram!(
        RENEWAL_BATCH_SIZE,
        Unit::Count,
        "Leases renewed per renewal round trip."
    );
    describe_counter!(
        SENT_RELEASES_TOTAL,
        Unit::Count,
        "Releases `run` sent without waiting for them, by what their confirmation in the background found (released, expired, stolen, failed)."
    );
    describe_gauge!(HELD, Unit::Count, "Locks this process holds now.");
    describe_histogram!(
        RENEWAL_MARGIN_RATIO,
        "The part of its ttl a renewed lease had left when a renewal of it was answered, by lock label and kind (about 2/3 on time; near 0, about to be lost)."
    );
    describe_histogram!(
        HOLD_TTL_RATIO,
        "A renewed hold's age in ttls, at each of its renewals, by lock label and kind."
    );
    describe_counter!(
        SERVER_EVENTS_TOTAL,
        Unit::Count,
        "What the client saw happen to its servers, by event: clock_step (a server's clock stepped forward: its locks expire early), restart (a server restarted: its locks may be gone), master_switch (Sentinel switched the master)."
    );
    describe_gauge!(
        LEADER,
        Unit::Count,
        "1 while this process leads the election of this name."
    );
    describe_counter!(
        LEADER_TERMS_TOTAL,
        Unit::Count,
        "Terms this process started as leader, by election name."
    );
    describe_counter!(
        LEADER_LOST_TOTAL,
        Unit::Count,
        "Terms of this process that ended with leadership lost rather than resigned, by election name and reason."
    );
    describe_gauge!(
        WAITING,
        Unit::Count,
        "Acquire calls of this process waiting for a busy lock now."
    );
}

/// Without the feature the hooks' state is zero-sized: a lease, a guard and an acquire carry
/// nothing for metrics.
#[cfg(not(feature = "metrics"))]
const _: () =
    assert!(size_of::<Held>() == 0 && size_of::<Waiting>() == 0 && size_of::<Attempt>() == 0);

/// How an acquire call ended: the `outcome` of `distlock_acquire_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Taken (at once or after waiting).
    Acquired,
    /// Re-entered a lock the call chain already held.
    Reentered,
    /// Busy, without `wait`.
    Busy,
    /// Busy, on a `skip` function: the body did not run.
    Skipped,
    /// Busy until `wait` ran out.
    Timeout,
    /// Any other error (Redis, response timeout, configuration, a lost outer hold, ...).
    Error,
}

impl Outcome {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Reentered => "reentered",
            Outcome::Busy => "busy",
            Outcome::Skipped => "skipped",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

impl Outcome {
    /// How an acquire call ended (`Ok(reentry)` with a guard, or the error), on a `skip`
    /// function or not, with `wait` or not.
    pub(crate) fn of(result: Result<bool, &Error>, skip: bool, waits: bool) -> Outcome {
        match result {
            Ok(false) => Outcome::Acquired,
            Ok(true) => Outcome::Reentered,
            Err(e) if e.is_busy() && skip => Outcome::Skipped,
            Err(e) if e.is_busy() && waits => Outcome::Timeout,
            Err(e) if e.is_busy() => Outcome::Busy,
            Err(_) => Outcome::Error,
        }
    }
}

/// Every reason a hold is lost for, in the order of [`LossReason`]'s variants.
const REASONS: [LossReason; 6] = [
    LossReason::Expired,
    LossReason::Stolen,
    LossReason::Unreachable,
    LossReason::LeaseElapsed,
    LossReason::Refused,
    LossReason::Unreplicated,
];

/// The `outcome` labels of `distlock_sent_releases_total`.
const SENT_OUTCOMES: [&str; 4] = ["released", "expired", "stolen", "failed"];

/// The label sets whose rare counters this process made at 0 ([`zero_rare_counters`]).
#[cfg(feature = "metrics")]
static ZEROED: std::sync::LazyLock<std::sync::RwLock<std::collections::HashSet<Labels>>> =
    std::sync::LazyLock::new(Default::default);

/// Makes the series of the rare counters of `labels` (`distlock_lost_total` for every reason,
/// `distlock_sent_releases_total` for every outcome) at 0, the first time this process holds a
/// lock of these labels: a counter series that first appears at 1 is an increase that
/// Prometheus' `increase()` and `rate()` never see, so the first loss of a lock would not
/// alert. A lookup in a read-locked set afterwards.
#[cfg(feature = "metrics")]
fn zero_rare_counters(labels: Labels) {
    if crate::sync::read(&ZEROED).contains(&labels) {
        return;
    }
    if !crate::sync::write(&ZEROED).insert(labels) {
        return;
    }
    let Labels { lock, kind } = labels;
    for reason in REASONS {
        ::metrics::counter!(LOST_TOTAL, "lock" => lock, "kind" => kind, "reason" => reason_label(reason))
            .increment(0);
    }
    for outcome in SENT_OUTCOMES {
        ::metrics::counter!(SENT_RELEASES_TOTAL, "lock" => lock, "kind" => kind, "outcome" => outcome)
            .increment(0);
    }
}

/// The `reason` label of `distlock_lost_total`.
pub(crate) fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "expired",
        LossReason::Stolen => "stolen",
        LossReason::Unreachable => "unreachable",
        LossReason::LeaseElapsed => "lease_elapsed",
        LossReason::Refused => "refused",
        LossReason::Unreplicated => "unreplicated",
        LossReason::Released => "released",
    }
}

/// One acquire call, as `distlock_acquire_total` counts it: made before the call (from the
/// builder), told the result after it. A call dropped before it ends counts nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt {
    #[cfg(feature = "metrics")]
    labels: Labels,
    #[cfg(feature = "metrics")]
    skip: bool,
    #[cfg(feature = "metrics")]
    waits: bool,
}

impl Attempt {
    /// `skip`: a busy lock skips the body (the attribute's `skip`); `waits`: `wait` was set.
    #[inline]
    pub(crate) fn new(labels: Labels, skip: bool, waits: bool) -> Self {
        Attempt {
            #[cfg(feature = "metrics")]
            labels,
            #[cfg(feature = "metrics")]
            skip,
            #[cfg(feature = "metrics")]
            waits,
        }
    }

    /// The call ended: `Ok(reentry)` with a guard, or the error.
    #[inline]
    pub(crate) fn done(self, result: Result<bool, &Error>) {
        #[cfg(feature = "metrics")]
        {
            let outcome = Outcome::of(result, self.skip, self.waits);
            let Labels { lock, kind } = self.labels;
            ::metrics::counter!(ACQUIRE_TOTAL, "lock" => lock, "kind" => kind, "outcome" => outcome.as_str())
                .increment(1);
        }
    }
}

/// One acquire call's wait for a busy lock: `distlock_waiting` while it waits (until it takes
/// the lock, gives up, fails or is dropped), and `distlock_wait_seconds` when it then takes it.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    #[cfg(feature = "metrics")]
    labels: Option<Labels>,
}

impl Waiting {
    /// The call starts waiting (once; later calls change nothing).
    #[inline]
    pub(crate) fn start(&mut self, labels: Labels) {
        #[cfg(feature = "metrics")]
        if self.labels.is_none() {
            let Labels { lock, kind } = labels;
            ::metrics::gauge!(WAITING, "lock" => lock, "kind" => kind).increment(1.0);
            self.labels = Some(labels);
        }
    }

    /// The call took the lock; `started`: when it was made. Records the wait if it waited.
    #[inline]
    pub(crate) fn acquired(&mut self, started: Instant) {
        #[cfg(feature = "metrics")]
        if let Some(Labels { lock, kind }) = self.labels.take() {
            ::metrics::gauge!(WAITING, "lock" => lock, "kind" => kind).decrement(1.0);
            ::metrics::histogram!(WAIT_SECONDS, "lock" => lock, "kind" => kind)
                .record(started.elapsed().as_secs_f64());
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(Labels { lock, kind }) = self.labels.take() {
            ::metrics::gauge!(WAITING, "lock" => lock, "kind" => kind).decrement(1.0);
        }
    }
}

/// The metrics side of one lease: `distlock_held` counts it from the acquire until the guard
/// goes or the lock is lost (whichever comes first, once), `distlock_lost_total` counts its
/// loss (once, and only while held), `distlock_hold_seconds` the guard's life, and each renewal
/// its margin and age (`distlock_renewal_margin_ratio`, `distlock_hold_ttl_ratio`). A
/// re-entry's lease counts nothing (its lock is counted by the outer hold).
#[derive(Debug)]
pub(crate) struct Held {
    /// `None`: a re-entry.
    #[cfg(feature = "metrics")]
    labels: Option<Labels>,
    /// When the acquire was sent.
    #[cfg(feature = "metrics")]
    since: Instant,
    /// Counted in `distlock_held` now.
    #[cfg(feature = "metrics")]
    held: AtomicBool,
}

impl Held {
    /// A lease just taken (`outer`), or a re-entry's (`!outer`: counts nothing); `since`: when
    /// its acquire was sent.
    #[inline]
    pub(crate) fn new(labels: Labels, outer: bool, since: Instant) -> Self {
        #[cfg(feature = "metrics")]
        if outer {
            zero_rare_counters(labels);
            let Labels { lock, kind } = labels;
            ::metrics::gauge!(HELD, "lock" => lock, "kind" => kind).increment(1.0);
        }
        Held {
            #[cfg(feature = "metrics")]
            labels: outer.then_some(labels),
            #[cfg(feature = "metrics")]
            since,
            #[cfg(feature = "metrics")]
            held: AtomicBool::new(outer),
        }
    }

    /// A renewal of the lease (of `ttl`) was answered: `deadline` says until when the lease
    /// was guaranteed before it (called only with the feature, before the lease is extended).
    #[inline]
    pub(crate) fn renewed(&self, ttl: Duration, deadline: impl FnOnce() -> Instant) {
        #[cfg(feature = "metrics")]
        if let Some(Labels { lock, kind }) = self.labels {
            let now = Instant::now();
            let ttl = ttl.as_secs_f64();
            let margin = deadline().saturating_duration_since(now).as_secs_f64();
            let age = now.saturating_duration_since(self.since).as_secs_f64();
            ::metrics::histogram!(RENEWAL_MARGIN_RATIO, "lock" => lock, "kind" => kind)
                .record(margin / ttl);
            ::metrics::histogram!(HOLD_TTL_RATIO, "lock" => lock, "kind" => kind).record(age / ttl);
        }
    }

    /// The lock was lost (the lease's first loss, or a release that found it not ours).
    #[inline]
    pub(crate) fn lost(&self, reason: LossReason) {
        #[cfg(feature = "metrics")]
        if let Some(Labels { lock, kind }) = self.leave() {
            ::metrics::counter!(LOST_TOTAL, "lock" => lock, "kind" => kind, "reason" => reason_label(reason))
                .increment(1);
        }
    }

    /// The guard is released or dropped; `acquired_at`: when its acquire was sent.
    #[inline]
    pub(crate) fn end(&self, acquired_at: Instant) {
        #[cfg(feature = "metrics")]
        if let Some(Labels { lock, kind }) = self.labels {
            ::metrics::histogram!(HOLD_SECONDS, "lock" => lock, "kind" => kind)
                .record(acquired_at.elapsed().as_secs_f64());
            self.leave();
        }
    }

    /// What the confirmation of a release sent without waiting (`run`) found: `Ok(None)`
    /// released, `Ok(Some(reason))` the lock was already gone or another owner's, `Err(())`
    /// no answer (the lock expires at its ttl).
    #[inline]
    pub(crate) fn sent_release(&self, found: Result<Option<LossReason>, ()>) {
        #[cfg(feature = "metrics")]
        if let Some(Labels { lock, kind }) = self.labels {
            let outcome = match found {
                Ok(None) => "released",
                Ok(Some(reason)) => reason_label(reason),
                Err(()) => "failed",
            };
            ::metrics::counter!(SENT_RELEASES_TOTAL, "lock" => lock, "kind" => kind, "outcome" => outcome)
                .increment(1);
        }
    }

    /// Out of `distlock_held`, if still in it: the labels, the first time only.
    #[cfg(feature = "metrics")]
    fn leave(&self) -> Option<Labels> {
        let labels = self.labels?;
        self.held.swap(false, Ordering::AcqRel).then(|| {
            let Labels { lock, kind } = labels;
            ::metrics::gauge!(HELD, "lock" => lock, "kind" => kind).decrement(1.0);
            labels
        })
    }
}

#[cfg(feature = "metrics")]
impl Drop for Held {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A waiting acquire (of `labels`) failed transiently and tries again after a pause.
#[inline]
pub(crate) fn acquire_retry(labels: Labels) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(ACQUIRE_RETRIES_TOTAL, "lock" => labels.lock, "kind" => labels.kind)
        .increment(1);
}

/// What one lease's renewal found: the `outcome` of `distlock_renewals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalOutcome {
    /// Extended (and acknowledged by the replicas it asks for).
    Ok,
    /// Not extended: no answer in time, an error reply, or too few replicas acknowledged.
    /// Retried; if that lasts until the lease runs out, the lock is lost.
    Failed,
    /// The lock was gone or another owner's.
    Lost,
}

/// One lease's renewal attempt.
#[inline]
pub(crate) fn renewal(outcome: RenewalOutcome) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match outcome {
            RenewalOutcome::Ok => "ok",
            RenewalOutcome::Failed => "failed",
            RenewalOutcome::Lost => "lost",
        };
        ::metrics::counter!(RENEWALS_TOTAL, "outcome" => outcome).increment(1);
    }
}

/// One renewal round trip, for `leases` leases.
#[inline]
pub(crate) fn renewal_batch(leases: usize) {
    #[cfg(feature = "metrics")]
    {
        #[allow(clippy::cast_precision_loss)] // batch sizes are small
        ::metrics::histogram!(RENEWAL_BATCH_SIZE).record(leases as f64);
    }
}

/// What the client saw happen to a server: the `event` of `distlock_server_events_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerEvent {
    /// A server's wall clock stepped forward (`deploy::server_check`): its locks expire early.
    ClockStep,
    /// A server restarted (its run id changed): the locks it held may be gone.
    Restart,
    /// Sentinel switched the master (announced, or found by asking the sentinels).
    MasterSwitch,
}

impl ServerEvent {
    /// The label value.
    fn as_str(self) -> &'static str {
        match self {
            ServerEvent::ClockStep => "clock_step",
            ServerEvent::Restart => "restart",
            ServerEvent::MasterSwitch => "master_switch",
        }
    }
}

/// The client saw `event` happen to one of its servers.
#[inline]
pub(crate) fn server_event(event: ServerEvent) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(SERVER_EVENTS_TOTAL, "event" => event.as_str()).increment(1);
}

/// The client watches for `events`: their series exist from now on, at 0 until one happens (a
/// counter that first appears at 1 is an increase that `increase()` and `rate()` never see).
#[inline]
pub(crate) fn server_events_watched(events: &[ServerEvent]) {
    #[cfg(feature = "metrics")]
    for event in events {
        ::metrics::counter!(SERVER_EVENTS_TOTAL, "event" => event.as_str()).increment(0);
    }
}

/// One term of this process as leader of an election: `distlock_leader` while it lasts,
/// counted in `distlock_leader_terms_total`, and in `distlock_leader_lost_total` when it is
/// lost (once: the caller counts each term's loss once, as it happens).
pub(crate) struct Leading {
    #[cfg(feature = "metrics")]
    name: String,
}

impl Leading {
    /// A term of `name` starts.
    #[inline]
    pub(crate) fn start(name: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            let name = name.to_owned();
            ::metrics::gauge!(LEADER, "name" => name.clone()).increment(1.0);
            ::metrics::counter!(LEADER_TERMS_TOTAL, "name" => name.clone()).increment(1);
            // At 0 until a term is lost (see `zero_rare_counters`); terms are rare.
            for reason in REASONS {
                ::metrics::counter!(LEADER_LOST_TOTAL, "name" => name.clone(), "reason" => reason_label(reason))
                    .increment(0);
            }
            Leading { name }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = name;
            Leading {}
        }
    }

    /// The term is lost, for `reason`.
    #[inline]
    pub(crate) fn lost(&self, reason: LossReason) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!(LEADER_LOST_TOTAL, "name" => self.name.clone(), "reason" => reason_label(reason)).increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = reason;
    }

    /// The term ends (its `Leadership` goes).
    #[inline]
    pub(crate) fn end(&self) {
        #[cfg(feature = "metrics")]
        ::metrics::gauge!(LEADER, "name" => self.name.clone()).decrement(1.0);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod bucket_tests {
    use super::*;

    #[test]
    fn every_histogram_has_rising_buckets_and_the_old_hold_alert_its_boundaries() {
        let names: Vec<&str> = HISTOGRAM_BUCKETS.iter().map(|(name, _)| *name).collect();
        for histogram in [
            WAIT_SECONDS,
            HOLD_SECONDS,
            RENEWAL_BATCH_SIZE,
            RENEWAL_MARGIN_RATIO,
            HOLD_TTL_RATIO,
        ] {
            assert!(names.contains(&histogram), "{histogram} has no buckets");
        }
        for (name, buckets) in HISTOGRAM_BUCKETS {
            assert!(
                buckets.windows(2).all(|w| w[0] < w[1]),
                "{name}: {buckets:?}"
            );
        }
        let (_, ttls) = HISTOGRAM_BUCKETS
            .iter()
            .find(|(name, _)| *name == HOLD_TTL_RATIO)
            .unwrap();
        assert!(ttls.contains(&100.0) && ttls.iter().any(|&b| b > 100.0));
    }
}
