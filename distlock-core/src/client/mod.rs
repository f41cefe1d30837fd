//! A connected client: the command connection, the watchdog and the release subscriber.

pub(crate) mod batch;

pub(crate) mod identity;
pub(crate) mod waiting;
pub(crate) mod watchdog;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

use crate::background::Background;
use crate::client::batch::{Batcher, OnAnswer};
use crate::client::waiting::cohort::Carry;
use crate::client::waiting::{Subscription, Waiters};
use crate::client::watchdog::{Batching, Renewal, Watchdog};
use crate::config::Config;
use crate::deploy::backend::{Backend, Link};
use crate::deploy::connection::Connection;
use crate::deploy::redlock;
use crate::deploy::redlock::quorum::{self, Quorate};
use crate::deploy::server_check::ServerCheck;
use crate::deploy::{CallError, Deployment};
use crate::error::{is_error_reply, Error, Operation};
use crate::lease::{fence_kept, guaranteed_until};
use crate::wire::calls::{AcquireCall, Acquired, ReleaseCall, Released};
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;
use crate::wire::request::{self, ReplicaWait};
use crate::wire::scripts;

/// A connection to Redis (one server, or a Redis Cluster: see [`Config::cluster`]) with its
/// lock defaults. Cheap to clone.
///
/// Get one from [`Config::connect`] (not registered), [`Config::install`] / [`crate::init`]
/// (the default client) or [`Config::install_as`] (a named client). It reconnects by itself
/// after Redis restarts.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    name: Option<String>,
    config: Config,
    /// Where its calls go.
    deployment: Deployment,
    /// Group commit of plain acquires and releases (standalone Redis; `None` in a cluster).
    batcher: Option<Arc<Batcher>>,
    watchdog: Watchdog,
    /// The servers' clocks, read for steps (`Config::server_check`).
    checks: Arc<ServerCheck>,
    waiters: Waiters,
    background: Background,
    /// `d2:` and 128 random bits; owners are `<id>:<n>`, unique across processes.
    id: String,
    next: AtomicU64,
    /// A cluster: release notifications are sharded (`SPUBLISH`) and keys routed by slot (the
    /// deployment's answer, kept).
    sharded: bool,
    /// Leases are confirmed after master switches, clock steps or restarts: see [`Client::follows_switches`].
    follows_switches: bool,
}

impl Config {
    /// Connects and returns a client that is not registered globally.
    pub async fn connect(self) -> Result<Client, Error> {
        Client::connect(self, None).await
    }
}

/// A future made and boxed in this crate (see [`Client::connect`]).
pub(crate) type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Client {
    /// Validates `config`, connects and starts the client's background work.
    ///
    /// Boxed here, never inlined: the state machine of connecting (and its drop glue) is then
    /// compiled once, in this crate, not again in every crate that connects a client (the state
    /// machines of non-generic `async fn`s are instantiated where they are used).
    #[inline(never)]
    pub(crate) fn connect(config: Config, name: Option<String>) -> Boxed<Result<Client, Error>> {
        Box::pin(Client::open(config, name))
    }

    async fn open(config: Config, name: Option<String>) -> Result<Client, Error> {
        config.validate()?;
        let backend = Arc::new(Backend::open(&config)?);
        let connect_error = |source| Error::Connect {
            to: config.target(),
            source,
        };
        // The client's own runtime thread: its connections and tasks must not depend on the
        // runtime that happens to call `connect` (it may be a test's, gone a moment later).
        // A release in flight when its caller's runtime shuts down (or the client is dropped)
        // is waited for: it may fail with the runtime's connection, reconnect and be sent
        // again, each within its timeout.
        let background =
            Background::start(settle_bound(&config)).map_err(|e| connect_error(e.into()))?;
        background.watch_caller();
        let connect_within = config
            .connect_timeout
            .saturating_add(config.response_timeout);
        // RedLock: the masters connect lazily (a minority may be down); `backend` is the first
        // master's. The identity record goes to every master, and the waiters subscribe on
        // every master.
        let quorum = (!config.redlock_masters.is_empty())
            .then(|| redlock::connect(&config, &background))
            .transpose()?;
        // Every server the client talks to: the quorum's masters, or the one connection.
        let (deployment, masters) = match quorum {
            Some(quorum) => {
                let masters = quorum.masters();
                // With the client's runtime entered, as every later call to a master
                // (`Quorum::call`): the masters' connections are made there.
                background.enter(check_masters(&masters, &config)).await?;
                (Deployment::Quorum(Arc::new(quorum)), masters)
            }
            None => {
                let conn = tokio::time::timeout(connect_within, backend.command_link(&background))
                    .await
                    .map_err(|_| Error::ConnectTimeout {
                        to: config.target(),
                        after: connect_within,
                    })?
                    .map_err(connect_error)?;
                check_server(conn.clone(), &config).await?;
                let masters = vec![(conn.clone(), backend.clone())];
                let conn = Connection::new(conn, backend.clone(), background.clone());
                (Deployment::Direct(Arc::new(conn)), masters)
            }
        };
        let id = format!("{}{}", scripts::VERSION_TAG, uuid::Uuid::new_v4().simple());
        let (handle, name_ref) = (background.handle(), name.as_deref());
        // RedLock: a subscriber per master (`waiters` counts their messages).
        let backends = masters.iter().map(|(_, backend)| backend.clone()).collect();
        let announce = identity::announce(masters, handle, &config, &id, name_ref);
        if deployment.counts_majority() {
            background.enter(announce).await;
        } else {
            announce.await;
        }
        let checks = Arc::new(ServerCheck::start(
            deployment.connections(),
            config.server_check,
            config.response_timeout,
            &background,
        ));
        let watchdog = Watchdog::start(
            deployment.clone(),
            checks.clone(),
            background.handle().clone(),
            Batching {
                size: config.renew_batch,
                per_slot: backend.is_cluster(),
                replica_timeout: config.replica_timeout,
                timeout: config.response_timeout,
            },
        );
        let waiters = Waiters::new(
            backends,
            config.connect_timeout,
            config.response_timeout,
            background.clone(),
        );
        let sharded = deployment.publishes_sharded();
        let follows_switches = deployment.watch_switches().is_some() || checks.is_on();
        // The group commit is the one connection's (never a cluster's: its keys span nodes).
        let batcher = deployment.direct().filter(|_| !sharded).map(|conn| {
            Arc::new(Batcher::new(
                conn.clone(),
                background.handle().clone(),
                config.response_timeout,
            ))
        });
        tracing::debug!(url = %config.redacted_url(), client = ?name, "distlock client connected");
        Ok(Client {
            inner: Arc::new(Inner {
                name,
                config,
                deployment,
                batcher,
                watchdog,
                checks,
                waiters,
                background,
                id,
                next: AtomicU64::new(0),
                sharded,
                follows_switches,
            }),
        })
    }

    /// The name this client was installed under (`None` for the default or unregistered client).
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The configuration this client was created with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Number of leases the watchdog is renewing right now.
    pub fn renewing(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// Number of release channels this client is subscribed to (waiters present) right now.
    pub fn waiting_channels(&self) -> usize {
        self.inner.waiters.active_channels()
    }

    /// Number of this client's waiters for the lock `name` that wait in the client for one of
    /// its own releases of that lock to queue them in Redis, instead of sending an attempt of
    /// their own (0 for a name that is not a lock's; see the crate docs, "Handed over in
    /// turn").
    pub fn waiting_in_client(&self, name: &str) -> usize {
        LockKeys::new(&self.inner.config.key_prefix, name)
            .map_or(0, |keys| self.inner.waiters.deferred(keys.channel()))
    }

    /// Number of background tasks in flight: releases `run` sent and not yet answered,
    /// releases of dropped guards and cancelled acquires, unsubscribes of departed waiters, and (over a RedLock quorum) the requests to
    /// masters that had not answered when their call was decided. Zero when the client is at
    /// rest.
    pub fn background_tasks(&self) -> usize {
        self.inner.background.count()
    }

    /// Waits until this client's background work is done: the releases that
    /// [`LockBuilder::run`](crate::LockBuilder::run) (and so `#[distributed_lock]`) sent
    /// without waiting for their answers, the releases of dropped guards and cancelled
    /// acquires, unsubscribes. Each of them is bounded (by the response timeout, or a lease),
    /// so this returns.
    ///
    /// Returning from `main` needs no call: the runtime's shutdown waits for the work its tasks
    /// started. Call it (or [`crate::shutdown`], for every installed client) before the exits
    /// that skip that (`std::process::exit`, a signal handler): a release handed to the
    /// connection but not yet written when the process ends is lost, and its lock then expires
    /// at its ttl, as after a crash. Dropping the client lets its thread finish that work
    /// first, within the same bound as a runtime's shutdown.
    pub async fn settle(&self) {
        self.inner.background.settle().await;
    }

    /// A release hands the lock to the first waiter queued in Redis
    /// ([`Deployment::hands_over`]).
    pub(crate) fn hands_over(&self) -> bool {
        self.inner.deployment.hands_over()
    }

    /// Every call is counted by a majority of masters ([`Deployment::counts_majority`]).
    pub(crate) fn counts_majority(&self) -> bool {
        self.inner.deployment.counts_majority()
    }

    /// A fenced take's token comes from rounds over the masters' floors
    /// ([`Deployment::rounds_tokens`]).
    pub(crate) fn rounds_tokens(&self) -> bool {
        self.inner.deployment.rounds_tokens()
    }

    /// The servers that must agree on a call ([`Deployment::majority`]): the `required` of an
    /// [`Error::NoQuorum`].
    pub(crate) fn majority(&self) -> usize {
        self.inner.deployment.majority()
    }

    /// The fencing token of a take of `keys` whose acquire (sent at `sent_at`, for `ttl`)
    /// returned `taken` as its largest token: over RedLock raised above every earlier
    /// holder's ([`Deployment::fence_token`]), within the lease's validity. Fails with
    /// [`Error::NoQuorum`] when a round does not reach a majority, when the validity ran out
    /// meanwhile, or when every raise met another acquire's; the caller then releases the
    /// lock.
    pub(crate) async fn fence_token(
        &self,
        keys: &LockKeys,
        taken: u64,
        ttl: Duration,
        sent_at: Instant,
    ) -> Result<u64, Error> {
        let config = &self.inner.config;
        let retention = fence_kept(config.fence_retention, ttl);
        let valid_until = guaranteed_until(sent_at, ttl);
        let new_id = || self.new_request_id();
        self.inner
            .deployment
            .fence_token(
                keys,
                taken,
                retention,
                valid_until,
                config.response_timeout,
                new_id,
            )
            .await
            .map_err(|e| self.call_error(Operation::Acquire, keys.name(), e))
    }

    /// Release notifications go through sharded pub/sub ([`Deployment::publishes_sharded`],
    /// asked once at connect: the hot path reads it per call).
    pub(crate) fn publishes_sharded(&self) -> bool {
        self.inner.sharded
    }

    /// Keys are routed by hash slot ([`Deployment::routes_by_slot`], a cluster; asked once at
    /// connect).
    pub(crate) fn routes_by_slot(&self) -> bool {
        self.inner.sharded
    }

    /// Identity of this client, for matching held-lock frames.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// A fresh lock value for one acquisition: the protocol tag, 128 random bits of the client
    /// and a counter (`d2:<hex id>:<hex n>`), unique across processes. It is the owner check of
    /// every release and renewal.
    pub(crate) fn new_owner(&self) -> ShortId {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        ShortId::with_counter(&self.inner.id, b':', n)
    }

    /// This client's id, `d2:<hex id>`: the part of its lock values before their counter.
    pub(crate) fn owner_prefix(&self) -> &str {
        &self.inner.id
    }

    /// A fresh request id, unique within this client (`r<hex n>`): every reply echoes it.
    pub(crate) fn new_request_id(&self) -> ShortId {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        ShortId::with_counter("", b'r', n)
    }

    /// The epoch leases are confirmed against: master switches (Sentinel) and server clock
    /// steps and restarts seen so far (see `watchdog`).
    pub(crate) fn switches(&self) -> u64 {
        watchdog::epoch(&self.inner.deployment, &self.inner.checks)
    }

    /// Master switches seen so far (Sentinel; 0 elsewhere), without the server checks' steps
    /// and restarts: what the testing kit waits for after a failover it made.
    #[cfg(feature = "testing")]
    pub(crate) fn master_switches(&self) -> u64 {
        self.inner.deployment.switches()
    }

    /// True when every lease of this client still held was confirmed on the server since the
    /// latest master switch, clock step or restart it saw (see `watchdog`).
    #[cfg(feature = "testing")]
    pub(crate) fn leases_confirmed(&self) -> bool {
        self.inner.watchdog.all_confirmed(self.switches())
    }

    /// True where masters switch under the client (Sentinel) or server clocks are watched for
    /// steps: every lease is confirmed on the server after each (see `watchdog`).
    pub(crate) fn follows_switches(&self) -> bool {
        self.inner.follows_switches
    }

    /// Starts renewing a lease in the watchdog; returns the id to stop it with.
    pub(crate) fn start_renewal(&self, renewal: Renewal) -> u64 {
        self.inner.watchdog.register(renewal)
    }

    /// Stops renewing a lease (the next renewal batch does not contain it).
    pub(crate) fn stop_renewal(&self, id: u64) {
        self.inner.watchdog.unregister(id);
    }

    /// True if some task of this client waits for the lock whose release channel is `channel`.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.inner.waiters.has_waiters(channel)
    }

    /// The next of this client's waiters for `channel`'s lock that wait in the client, for a
    /// release of the lock by this client to queue in Redis (see `cohort`).
    pub(crate) fn carry_next(&self, channel: &str) -> Option<Carry> {
        self.inner.waiters.carry_next(channel, self.switches())
    }

    /// Subscribes a waiter to `channel`, the release channel of lock `name`.
    pub(crate) async fn subscribe(&self, channel: &str, name: &str) -> Result<Subscription, Error> {
        self.inner.waiters.subscribe(channel, name).await
    }

    /// Runs cleanup work (a background release) on the client's own runtime, counted in
    /// [`Client::background_tasks`].
    pub(crate) fn spawn_cleanup<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.background.spawn(task);
    }

    /// Runs a long-lived `task` on the client's own runtime (`Background::spawn_task`).
    pub(crate) fn spawn_task<F>(&self, task: F) -> tokio::task::AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.background.spawn_task(task)
    }

    /// Starts cleanup work at once on the caller's thread (what it sends first is queued
    /// before this returns), and finishes it on the client's own runtime: see
    /// `Background::spawn_started`.
    pub(crate) fn spawn_started<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.background.spawn_started(task);
    }

    /// Runs one script call with the client's response timeout, mapping failures to [`Error`]
    /// for the `op` of lock `name`.
    ///
    /// A reply for another request, a reply of the wrong shape or a timeout retires the
    /// connection (its reply stream is out of step) and fails as a connection error or
    /// [`Error::Timeout`].
    pub(crate) async fn call<C: Quorate>(
        &self,
        op: Operation,
        name: &str,
        call: &C,
    ) -> Result<C::Reply, Error> {
        self.call_acked(op, name, call)
            .await
            .map(|(reply, _)| reply)
    }

    /// [`Client::call`], with the number of replicas that acknowledged the call's write when it
    /// asked for a `WAIT`.
    pub(crate) async fn call_acked<C: Quorate>(
        &self,
        op: Operation,
        name: &str,
        call: &C,
    ) -> Result<(C::Reply, Option<usize>), Error> {
        let after = self.inner.config.response_timeout;
        // Sent outside the group commit: behind the releases `run` queued there. The wait for
        // them counts in the call's one response timeout (a group stuck on a frozen server
        // must not make the caller wait twice); nothing is sent if it runs out.
        let started = tokio::time::Instant::now();
        if let Some(batcher) = &self.inner.batcher {
            if !batcher.behind_releases().await {
                return Err(self.call_error(op, name, CallError::Timeout));
            }
        }
        let left = after.saturating_sub(started.elapsed());
        self.inner
            .deployment
            .call(call, left.max(Duration::from_millis(1)))
            .await
            .map_err(|e| self.call_error(op, name, e))
    }

    /// A plain acquire: grouped with others that arrive while one is in flight (see `batch`),
    /// unless it asks for a `WAIT` (which must follow its own write) or the backend is a
    /// cluster. With the number of replicas that acknowledged it, as [`Client::call_acked`].
    pub(crate) async fn take(
        &self,
        name: &str,
        call: &AcquireCall<'_>,
    ) -> Result<(Acquired, Option<usize>), Error> {
        match (&self.inner.batcher, call.wait) {
            (Some(batcher), None) => batcher
                .acquire(call)
                .await
                .map(|acquired| (acquired, None))
                .map_err(|e| self.call_error(Operation::Acquire, name, e)),
            _ => self.call_acked(Operation::Acquire, name, call).await,
        }
    }

    /// A release, grouped like [`Client::take`].
    pub(crate) async fn release(
        &self,
        name: &str,
        call: &ReleaseCall<'_>,
    ) -> Result<Released, Error> {
        match &self.inner.batcher {
            Some(batcher) => batcher
                .release(call)
                .await
                .map_err(|e| self.call_error(Operation::Release, name, e)),
            None => self.call(Operation::Release, name, call).await,
        }
    }

    /// True where the group commit runs (standalone Redis, Sentinel): see
    /// [`Client::queue_release`].
    pub(crate) fn groups_releases(&self) -> bool {
        self.inner.batcher.is_some()
    }

    /// A release sent without waiting (`run`), where the group commit runs (standalone Redis):
    /// queued now, behind nothing this client sends next; `on_answer` gets its answer in the
    /// task that sends its group (see `batch::OnAnswer`). Without a group commit (a cluster, a
    /// RedLock quorum) `on_answer` comes back unused.
    pub(crate) fn queue_release<F>(
        &self,
        name: &str,
        call: &ReleaseCall<'_>,
        on_answer: F,
    ) -> Result<(), F>
    where
        F: FnOnce(Result<Released, Error>) + Send + 'static,
    {
        let Some(batcher) = &self.inner.batcher else {
            return Err(on_answer);
        };
        let (client, name) = (self.clone(), name.to_owned());
        // In `background_tasks` (and `settle`) until answered.
        let running = self.inner.background.track();
        let handler = OnAnswer::new(move |answer: Result<Released, CallError>| {
            // A retry it starts is still its caller's work (see `background::callers`).
            running.scope(|| {
                on_answer(answer.map_err(|e| client.call_error(Operation::Release, &name, e)));
            });
            drop(running);
        });
        batcher.queue_release(call, handler);
        Ok(())
    }

    /// How long background work in flight (a release) is waited for when a caller's runtime
    /// shuts down or the client is dropped, and retried for at most: [`settle_bound`].
    pub(crate) fn settle_bound(&self) -> Duration {
        settle_bound(&self.inner.config)
    }

    fn call_error(&self, op: Operation, key: &str, error: CallError) -> Error {
        match error {
            // `Deployment::call` reports a timed-out reply (whichever timer saw it) as `Timeout`.
            CallError::Timeout => Error::Timeout {
                op,
                key: key.to_owned(),
                after: self.inner.config.response_timeout,
            },
            CallError::Redis(source) => Error::from_redis(op, key, source),
            CallError::NoQuorum { agreed, required } => Error::NoQuorum {
                op,
                key: key.to_owned(),
                agreed,
                required,
            },
        }
    }

    /// The `WAIT` for a lock that asks `replicas` replicas to acknowledge it (none for 0).
    pub(crate) fn replica_wait(&self, replicas: usize) -> Option<ReplicaWait> {
        (replicas > 0).then(|| ReplicaWait {
            replicas: self.inner.deployment.replicas_to_wait_for(replicas),
            timeout: self.inner.config.replica_timeout,
        })
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.inner.name)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// The checks and set-up of a fresh connection: the server must answer (see [`reach`]: a
/// missing password fails here), the scripts are loaded, and the eviction policy is looked
/// at.
async fn check_server(conn: Link, config: &Config) -> Result<(), Error> {
    let timeout = config.response_timeout;
    reach(conn.clone(), config).await?;
    preload_scripts(conn.clone(), timeout).await;
    match eviction_policy(conn, timeout).await {
        Some(policy) if policy != "noeviction" => {
            if config.require_noeviction {
                return Err(Error::EvictionPolicy { policy });
            }
            tracing::warn!(
                %policy,
                "Redis maxmemory-policy is not `noeviction`: under memory pressure it may evict lock keys (they carry a ttl), handing a held lock to someone else before its holder learns of it; set `maxmemory-policy noeviction` (or `Config::require_noeviction(true)` to refuse such a server)"
            );
        }
        Some(_) => {}
        None => tracing::debug!("could not read maxmemory-policy (CONFIG GET not permitted?)"),
    }
    Ok(())
}

/// [`check_server`] on every master of a RedLock quorum at once: the connect fails (with the first failing master's error) only if so
/// many are down or refuse (a wrong password, a TLS handshake that fails) that no majority is
/// left, as a connect to one server fails when it is down. A client starts while a minority
/// is down; those masters connect when they are back.
async fn check_masters(links: &[(Link, Arc<Backend>)], config: &Config) -> Result<(), Error> {
    let masters = links.len();
    let checks = links
        .iter()
        .map(|(link, _)| check_server(link.clone(), config));
    let refused: Vec<Error> = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    let left = masters - refused.len();
    match refused.into_iter().next() {
        Some(error) if left < quorum::majority(masters) => Err(error),
        _ => Ok(()),
    }
}

/// A `PING` answered within the connect and response timeouts (a lazily connecting link
/// connects for it). An error reply counts as an answer (the server is there), except NOAUTH:
/// a server that wants a password nobody gave answers it to anything, and failing here
/// reports the missing password at `init`, not at the first lock.
async fn reach(mut conn: Link, config: &Config) -> Result<(), Error> {
    let within = config
        .connect_timeout
        .saturating_add(config.response_timeout);
    let ping = redis::cmd("PING");
    match tokio::time::timeout(within, ping.exec_async(&mut conn)).await {
        Err(_) => Err(Error::ConnectTimeout {
            to: config.target(),
            after: within,
        }),
        Ok(Err(source)) if source.code() == Some("NOAUTH") || !is_error_reply(&source) => {
            Err(Error::Connect {
                to: config.target(),
                source,
            })
        }
        Ok(_) => Ok(()),
    }
}

/// The server's `maxmemory-policy`, if `CONFIG GET` is permitted (managed services often
/// refuse it).
async fn eviction_policy(mut conn: Link, timeout: Duration) -> Option<String> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    // A map in RESP3, name/value pairs in RESP2: redis-rs reads both into a map.
    let reply = cmd.query_async::<std::collections::HashMap<String, String>>(&mut conn);
    match tokio::time::timeout(timeout, reply).await {
        Ok(Ok(mut map)) => map.remove("maxmemory-policy"),
        _ => None,
    }
}

/// Loads the scripts at connect so the first locks skip the NOSCRIPT round trip (which would
/// also let a request sent meanwhile overtake the script call: `run`'s release is not waited
/// for). One `SCRIPT LOAD` command per script, not a pipeline: a cluster connection sends that
/// command to every node, a pipeline to one. Best effort: a server that refuses `SCRIPT LOAD`
/// here still gets them loaded on first use.
async fn preload_scripts(conn: Link, timeout: Duration) {
    let loads = request::ALL.iter().map(|script| {
        let mut conn = conn.clone();
        async move { script.load().exec_async(&mut conn).await }
    });
    match tokio::time::timeout(timeout, futures_util::future::try_join_all(loads)).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::debug!(%error, "script preload failed; scripts load on first use")
        }
        Err(_) => tracing::debug!("script preload timed out; scripts load on first use"),
    }
}

/// Connect timeout + 2 × response timeout: a release in flight may fail with its connection,
/// reconnect and be sent again, each within its timeout.
fn settle_bound(config: &Config) -> Duration {
    config
        .connect_timeout
        .saturating_add(config.response_timeout.saturating_mul(2))
}
