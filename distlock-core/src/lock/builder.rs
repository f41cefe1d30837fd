//! Taking a hold of any kind: the builder (`lock`, `semaphore`, `lock_all`, `read`), its
//! options and their checks, resolved into the kind and its `Terms` (the wait loop is
//! `waiting`'s; running a body under a hold is `run`'s).

use std::time::Duration;

use tracing::Instrument;

use crate::client::{Boxed, Client};
use crate::config::{Config, ALL_NEEDS_SENTINEL, ALL_REPLICAS, MAX_REPLICAS};
use crate::error::Error;
use crate::lease::{check_ttl, millis_ceil, MAX_TTL};
use crate::lock::guard::LockGuard;
use crate::lock::kind::Kind;
use crate::lock::terms::Terms;
use crate::lock::wait_loop;
use crate::metrics::{self, Attempt, Labels, Outcome};
use crate::registry;
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
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::Error> {
/// use std::time::Duration;
/// let guard = distlock::lock("order:42")
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
    /// A lock, one of a semaphore's permits, or a set (a read's kind is resolved with the
    /// terms: `read`).
    kind: Kind,
    /// `.read()`: a shared hold (checked against the kind when the acquire starts).
    read: bool,
    /// A leader election's lock ([`LockBuilder::election`]): its metrics' `kind` is `leader`.
    election: bool,
    /// [`crate::lock_all`]: the set's other names (`name` is its first); `None` for one lock.
    others: Option<Vec<String>>,
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
        kind: Kind::Exclusive,
        read: false,
        election: false,
        others: None,
    }
}

impl Client {
    /// Starts building a lock on `name` through this client.
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder {
            client: ClientChoice::Given(self.clone()),
            ..lock(name)
        }
    }
}

/// Starts building the acquisition of one of the `permits` permits of the semaphore `name`
/// through the default client (see [`crate::init`]): at most `permits` holders at once,
/// across every process that uses the name.
///
/// The builder is the lock's ([`LockBuilder`]) with every method: `.ttl()`, `.renew()`,
/// `.wait()`, `.fenced()`, `.min_hold()`, `.min_replicas()`, `.acquire()` (a [`crate::LockGuard`]
/// holding one permit) and `.run(body)`. Every guarantee of a lock holds per permit: each
/// holder's permit is leased on its own (a holder that dies frees its permit when its own ttl
/// runs out, not the others'), renewal extends only a live permit, a loss cancels the body of
/// `run` and reports [`Error::Lost`], a release (or a dropped guard) frees the permit and
/// wakes a waiter, and with `.fenced(true)` each permit comes with a fencing token strictly
/// greater than every earlier token for the name. Inside a body run under a permit, taking the
/// same semaphore again (same name, same client) re-enters: it takes no second permit.
///
/// Everyone using one name must agree on `permits`: an acquire that asks for another count
/// than the live holders took the semaphore with fails with [`Error::PermitsMismatch`] (the
/// count is never resized while anyone holds a permit; once every permit is released or
/// expired, the next holder's count stands). A lock ([`crate::lock()`]) and a semaphore of the
/// same name exclude each other: the second gets [`Error::Incompatible`].
///
/// `permits` is at least 1 (0 fails the acquire with [`Error::InvalidConfig`]).
///
/// Over a RedLock quorum ([`crate::Config::redlock`]) a permit is taken, and renewed, by
/// `⌊permits·masters/(permits+1)⌋ + 1` masters, not by a majority (each master grants at most
/// `permits`; with fewer, more than `permits` holders could each find enough masters): one
/// permit needs a majority, 2 of 5 masters need 4, many permits nearly every master. So a
/// semaphore tolerates fewer masters down than a lock (2 permits over 5 masters: one down,
/// not two; with more down the acquire fails with [`Error::NoQuorum`], or waits). Waiters
/// there retry on each release and on the first lease's end, without the lock's FIFO queue.
/// Fencing tokens stay unique per name there too, each above every token handed out before
/// its acquire started.
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::Error> {
/// use std::time::Duration;
/// let guard = distlock::semaphore("api:acme", 5)
///     .ttl(Duration::from_secs(10))
///     .renew(true)
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// assert_eq!(guard.permits(), Some(5));
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub fn semaphore(name: impl Into<String>, permits: u32) -> LockBuilder {
    lock(name).with_kind(Kind::Permits(permits))
}

impl Client {
    /// Starts building the acquisition of one permit of a semaphore through this client (see
    /// [`crate::semaphore`]).
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockBuilder {
        self.lock(name).with_kind(Kind::Permits(permits))
    }
}

/// Starts building one acquisition of several locks at once, all or none, through the default
/// client (see [`crate::init`]): the guard (or `run`'s body) holds every one of `names`.
///
/// The order of `names` does not matter and a name may appear twice (`from == to`): the set is
/// sorted and its duplicates removed before anything is sent, so two callers naming the same
/// locks in any order never deadlock (see the crate docs, "Sets of locks"). A set of one
/// distinct name is that lock.
///
/// The builder is the lock's ([`LockBuilder`]): `.ttl()`, `.renew()`, `.wait()`,
/// `.min_hold()`, `.max_hold()`, `.min_replicas()`, `.fenced()` (one token per lock, see
/// [`LockGuard::token_of`](crate::LockGuard::token_of) and [`crate::fencing_token_of`]),
/// `.acquire()` and `.run(body)`. Every guarantee of a lock holds for the set: one lease, until
/// the earliest of its locks' deadlines; renewal extends every lock, and the loss of any lock
/// is the loss of the set (`run`'s body cancelled, [`Error::Lost`]); a dropped acquire or guard
/// leaves none of the locks held. A set applies to locks: with `.read()` or a semaphore the
/// acquire fails with [`Error::InvalidConfig`], as does an empty set, or a fenced set over a
/// RedLock quorum.
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::Error> {
/// use std::time::Duration;
/// let guard = distlock::lock_all(["account:7", "account:3"])
///     .ttl(Duration::from_secs(5))
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// assert_eq!(guard.names().collect::<Vec<_>>(), ["account:3", "account:7"]);
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub fn lock_all<I>(names: I) -> LockBuilder
where
    I: IntoIterator,
    I::Item: Into<String>,
{
    let mut names = names.into_iter().map(Into::into);
    let first = names.next().unwrap_or_default();
    lock(first).with_others(names.collect())
}

impl Client {
    /// Starts building one acquisition of several locks at once through this client (see
    /// [`crate::lock_all`]).
    pub fn lock_all<I>(&self, names: I) -> LockBuilder
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let mut names = names.into_iter().map(Into::into);
        let first = names.next().unwrap_or_default();
        self.lock(first).with_others(names.collect())
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
    /// (about 1 µs; BENCHMARKS.md, "Where the time goes").
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
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// let guard = distlock::lock("ledger:7").min_replicas(1).acquire().await?;
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
    /// # use distlock_core as distlock;
    /// # async fn demo(id: u64) -> Result<(), distlock::Error> {
    /// let guard = distlock::lock(format!("order:{id}")).label("order:<id>").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn label(mut self, label: &'static str) -> Self {
        self.label = label;
        self
    }

    /// The lock of the leader election of its name: its metrics' `lock` label is the name
    /// ([`metrics::election_label`]) and their `kind` is `leader`.
    pub(crate) fn election(mut self) -> Self {
        self.label = metrics::election_label(&self.name);
        self.election = true;
        self
    }

    /// A busy lock will skip the caller's work (`#[distributed_lock(skip)]`): the acquire
    /// counts as `skipped` rather than `busy` in the metrics. Nothing else changes.
    pub(crate) fn skipping(mut self) -> Self {
        self.skip = true;
        self
    }

    /// Takes one of a semaphore's permits instead of the lock (see [`crate::semaphore`]).
    fn with_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// The other names of a set taken together (see [`crate::lock_all`]): a set is its own
    /// kind of hold.
    fn with_others(mut self, others: Vec<String>) -> Self {
        self.kind = Kind::Set;
        self.others = Some(others);
        self
    }

    /// Use the client installed under `name` with [`crate::Config::install_as`].
    pub fn client(mut self, name: impl Into<String>) -> Self {
        self.client = ClientChoice::Named(name.into());
        self
    }

    /// The lock's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The lock's ttl through `config` (its own, else the client's default).
    pub(crate) fn ttl_in(&self, config: &Config) -> Duration {
        self.ttl.unwrap_or(config.default_ttl)
    }

    /// The replicas this lock waits for through `config` (its own, else the client's default).
    pub(crate) fn min_replicas_in(&self, config: &Config) -> usize {
        self.min_replicas.unwrap_or(config.min_replicas)
    }

    /// The client this lock is taken through (the default, a named or a given one).
    pub(crate) fn resolve(&self) -> Result<Client, Error> {
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
        self.start_acquire().await
    }

    /// [`LockBuilder::acquire`], boxed here and never inlined, so that its state machine is
    /// compiled in this crate only (see [`Client::connect`]).
    #[inline(never)]
    fn start_acquire(self) -> Boxed<Result<LockGuard, Error>> {
        Box::pin(self.acquire_here())
    }

    /// The acquire itself (`run`'s session awaits it in place).
    pub(crate) async fn acquire_here(self) -> Result<LockGuard, Error> {
        let attempt = Attempt::new(self.labels(), self.skip, self.wait.is_some());
        let result = match self.terms() {
            Ok((client, first, kind, terms)) => {
                let span = self.span(terms.ttl);
                let others = self.others.as_deref().unwrap_or_default();
                let result = match kind.keys(&client, first, others) {
                    Ok((kind, keys)) if span.is_disabled() => {
                        wait_loop::acquire(client, keys, kind, terms).await
                    }
                    Ok((kind, keys)) => {
                        self.record_names(&span, &keys);
                        wait_loop::acquire(client, keys, kind, terms)
                            .instrument(span.clone())
                            .await
                    }
                    Err(error) => Err(error),
                };
                if !span.is_disabled() {
                    self.record_outcome(&span, result.as_ref().map(LockGuard::is_reentry));
                }
                result
            }
            Err(error) => Err(error),
        };
        attempt.done(result.as_ref().map(LockGuard::is_reentry));
        result
    }

    /// The span of one acquisition, its waiting included, with the fields of the OpenTelemetry
    /// convention (`docs/observability.md`, "OpenTelemetry"): `lock.name` (and `key`, the same)
    /// recorded once known, `lock.kind` and `lock.template` (the metrics' `kind` and `lock`
    /// labels), `lock.outcome` and `otel.status_code` when the acquire ends.
    fn span(&self, ttl: Duration) -> tracing::Span {
        let Labels { lock, kind } = self.labels();
        tracing::debug_span!(
            "distlock.acquire",
            key = tracing::field::Empty,
            ttl_ms = millis_ceil(ttl),
            lock.name = tracing::field::Empty,
            lock.kind = kind,
            lock.template = lock,
            lock.outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    }

    /// Records how the acquire ended on its span: `lock.outcome` (the metrics' `outcome`, or
    /// `lost` when an outer hold re-entered was found gone), and `otel.status_code = "ERROR"`
    /// when it failed (`error`, `lost`; a busy lock is an answer, not a failure).
    fn record_outcome(&self, span: &tracing::Span, result: Result<bool, &Error>) {
        let outcome = match (Outcome::of(result, self.skip, self.wait.is_some()), result) {
            (Outcome::Error, Err(e)) if e.is_lost() => "lost",
            (outcome, _) => outcome.as_str(),
        };
        span.record("lock.outcome", outcome);
        if matches!(outcome, "error" | "lost") {
            span.record("otel.status_code", "ERROR");
        }
    }

    /// Records the names of the locks taken (`keys`) on the acquire's span: the lock's, or a
    /// set's joined by `, ` (recorded as a string, for [`crate::lock_all`] of one distinct
    /// name too).
    fn record_names(&self, span: &tracing::Span, keys: &[LockKeys]) {
        if self.others.is_none() {
            let name = keys[0].name();
            span.record("key", tracing::field::display(name));
            span.record("lock.name", name);
            return;
        }
        let names: Vec<&str> = keys.iter().map(LockKeys::name).collect();
        let names = names.join(", ");
        span.record("key", &names);
        span.record("lock.name", names);
    }

    /// The labels of this acquisition's metrics: its `lock` label, and its `kind` as the
    /// builder says it (a set of one distinct name still counts as a set).
    fn labels(&self) -> Labels {
        // A set asked for with `read` (refused) still counts as a set.
        let kind = if self.election {
            metrics::LEADER_KIND
        } else if self.read && self.others.is_none() {
            Kind::Read.label()
        } else {
            self.kind.label()
        };
        Labels {
            lock: self.label,
            kind,
        }
    }

    /// The client, the key layout, the kind and the checked terms of this acquisition.
    fn terms(&self) -> Result<(Client, LockKeys, Kind, Terms), Error> {
        let client = self.resolve()?;
        let config = client.config();
        let ttl = self.ttl_in(config);
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
        if min_replicas > 0 && client.counts_majority() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "lock `{}` asks for min_replicas, which does not apply to `Config::redlock` (its masters have no replicas to wait for)",
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
            fenced: self.fenced,
            min_replicas,
            label: self.labels(),
        };
        let kind = match self.read {
            true => self.kind.read(&self.name)?,
            false => self.kind,
        };
        kind.check(&self.name, &terms, &client)?;
        let keys = LockKeys::new(&config.key_prefix, &self.name)?;
        Ok((client, keys, kind, terms))
    }
}

impl LockBuilder {
    /// Takes a shared (read) hold instead of the lock: any number of read holders at once,
    /// while an ordinary (exclusive, "write") lock of the same name excludes them and is
    /// excluded by them. A reader meeting a writer, and a writer meeting readers, is busy
    /// ([`Error::Busy`], or waits with `.wait()`), never incompatible.
    ///
    /// **Writers do not starve**: a writer that waits for readers marks its intent next to the
    /// lock, and no new reader enters while it lives; the writer gets the lock when the readers
    /// inside leave (or their leases run out). The intent lasts one second unless the waiting
    /// writer renews it (it does, at each attempt), so a writer that went away holds new
    /// readers up for a second at most. The preference goes to writers: while writers keep
    /// waiting, one after another, new readers wait for them. A waiting writer is woken by
    /// each reader's release, and looks again at least every third of a second meanwhile (to
    /// renew its intent): one script call each.
    ///
    /// Every guarantee of a lock holds per read hold: each reader's share is its own lease (a
    /// reader that dies frees its share at its own ttl), renewed by `.renew(true)`, lost (the
    /// body of `run` cancelled, [`Error::Lost`]) when it can no longer be guaranteed, released
    /// on every exit path (waking waiters), fenced with `.fenced(true)` (tokens strictly
    /// increasing per name, across readers and writers).
    ///
    /// Re-entry in one call chain (same name, same client): a read inside a read takes no
    /// second share; a read inside a write re-enters the write (an exclusive hold covers
    /// reading); a write inside a read fails at once with [`Error::WriteInsideRead`] (a read
    /// hold is never upgraded: two readers upgrading would wait for each other).
    ///
    /// `read` applies to a lock, not to a semaphore (taking a semaphore's permit with `read`
    /// fails with [`Error::InvalidConfig`]). Over a RedLock quorum ([`crate::Config::redlock`])
    /// a read and a write each count when a majority of the masters granted them (any two such
    /// majorities share a master, which granted only one); readers and writers that wait there
    /// retry on releases, without the lock's FIFO queue.
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// let guard = distlock::lock("doc:7")
    ///     .read()
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2))
    ///     .acquire()
    ///     .await?;
    /// assert!(guard.is_shared());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(mut self) -> Self {
        self.read = true;
        self
    }
}
