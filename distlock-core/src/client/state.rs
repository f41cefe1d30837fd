//! What a connected client holds: [`Client`] (cheap to clone) over its shared state, and
//! what the rest of the runtime asks of it (its deployment's answers, ids, renewals, waiters,
//! background work).

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::background::Background;
use crate::client::batch::Batcher;
use crate::client::waiting::cohort::Carry;
use crate::client::waiting::{Subscription, Waiters};
use crate::client::watchdog::{self, Renewal, Watchdog};
use crate::config::Config;
use crate::deploy::server_check::ServerCheck;
use crate::deploy::Deployment;
use crate::error::Error;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;

/// A connection to Redis (one server, or a Redis Cluster: see [`Config::cluster`]) with its
/// lock defaults. Cheap to clone.
///
/// Get one from [`Config::connect`] (not registered), [`Config::install`] / [`crate::init`]
/// (the default client) or [`Config::install_as`] (a named client). It reconnects by itself
/// after Redis restarts.
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
}

/// What a client holds, shared by its clones.
pub(super) struct Inner {
    pub(super) name: Option<String>,
    pub(super) config: Config,
    /// Where its calls go.
    pub(super) deployment: Deployment,
    /// Group commit of plain acquires and releases (standalone Redis; `None` in a cluster).
    pub(super) batcher: Option<Arc<Batcher>>,
    pub(super) watchdog: Watchdog,
    /// The servers' clocks, read for steps (`Config::server_check`).
    pub(super) checks: Arc<ServerCheck>,
    pub(super) waiters: Waiters,
    pub(super) background: Background,
    /// `d2:` and 128 random bits; owners are `<id>:<n>`, unique across processes.
    pub(super) id: String,
    pub(super) next: AtomicU64,
    /// A cluster: release notifications are sharded (`SPUBLISH`) and keys routed by slot (the
    /// deployment's answer, kept).
    pub(super) sharded: bool,
    /// Leases are confirmed after master switches, clock steps or restarts: see [`Client::follows_switches`].
    pub(super) follows_switches: bool,
}

impl Client {
    /// The name this client was installed under (`None` for the default or unregistered client).
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The configuration this client was created with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The one command connection of a client of one server, a Sentinel master or a Cluster
    /// (`None` over RedLock), for what writes on the lock servers besides locks (a fenced
    /// store made from the client).
    pub(crate) fn command_connection(&self) -> Option<Arc<crate::deploy::connection::Connection>> {
        self.inner.deployment.direct().cloned()
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

    /// How long background work in flight (a release) is waited for when a caller's runtime
    /// shuts down or the client is dropped, and retried for at most: [`settle_bound`].
    pub(crate) fn settle_bound(&self) -> Duration {
        settle_bound(&self.inner.config)
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

/// Connect timeout + 2 × response timeout: a release in flight may fail with its connection,
/// reconnect and be sent again, each within its timeout.
pub(super) fn settle_bound(config: &Config) -> Duration {
    config
        .connect_timeout
        .saturating_add(config.response_timeout.saturating_mul(2))
}
