//! Which Redis deployment a client talks to, one server or a Redis Cluster, and the
//! connections it makes there: the rest of the runtime speaks to a [`Link`] (commands) and a
//! [`Subscriber`] (release notifications) and never asks which one it has.
//!
//! A cluster runs on redis-rs's own cluster client (`cluster-async`): it routes each request
//! by the slot of its first key (every key of one lock shares a slot), follows `MOVED` and
//! `ASK` (inside pipelines too), refreshes its slot map after a failover, and keeps sharded
//! subscriptions (`SSUBSCRIBE`) on the shard that owns their slot.
//!
//! A Sentinel deployment finds its master through the sentinels (see `sentinel`): the command
//! connection is found again when it fails or lands on a replica, the subscriber follows the
//! master by itself.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{
    AsyncPushSender, ConnectionLike, ConnectionManager, ConnectionManagerConfig,
    MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisConnectionInfo,
    RedisFuture, RedisResult, Value,
};

use crate::background::Background;
#[cfg(feature = "tls")]
use crate::config::uses_tls;
use crate::config::{redact_url, url_problem, Config, ALL_REPLICAS, MAX_REPLICAS};
use crate::deploy::sentinel::{follows_master_after, MasterLink, MasterSubscriber, Sentinels};
use crate::error::Error;

/// Where a client's connections go, and how they are made.
pub(crate) struct Backend {
    topology: Topology,
    connect_timeout: Duration,
    response_timeout: Duration,
}

/// The deployment behind the connections: one server, a cluster, or a master found through
/// Sentinel.
enum Topology {
    /// One server (with its TLS settings in the client's connection info).
    Single(Box<redis::Client>),
    /// A Redis Cluster: one client for commands and one (RESP3) for the subscriber.
    Cluster {
        commands: Box<ClusterClient>,
        builder: Box<dyn Fn() -> ClusterClientBuilder + Send + Sync>,
    },
    /// A master found through Redis Sentinel.
    Sentinel(Arc<Sentinels>),
}

/// A command connection: to one server (reconnecting by itself) or to a whole cluster.
#[derive(Clone)]
pub(crate) enum Link {
    /// The command connection to one server.
    Single(ConnectionManager),
    /// A short-lived connection to one server (identity refreshes, health probes).
    Plain(MultiplexedConnection),
    /// The cluster connection: one multiplexed connection per node, routed by slot.
    Cluster(ClusterConnection),
    /// The master of a Sentinel deployment, found on first use.
    Sentinel(MasterLink),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(conn) => conn.req_packed_command(cmd),
            Link::Plain(conn) => conn.req_packed_command(cmd),
            Link::Cluster(conn) => conn.req_packed_command(cmd),
            Link::Sentinel(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Link::Plain(conn) => conn.req_packed_commands(cmd, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
            Link::Sentinel(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(conn) => conn.get_db(),
            Link::Plain(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
            Link::Sentinel(conn) => conn.get_db(),
        }
    }
}

/// The subscriber connection: plain pub/sub on one server (or on the Sentinel master, followed
/// across failovers), sharded pub/sub (`SSUBSCRIBE`, the channel's own shard) in a cluster.
#[derive(Clone)]
pub(crate) enum Subscriber {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(MasterSubscriber),
}

impl Subscriber {
    /// True for a cluster's (sharded) subscriber.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Subscriber::Cluster(_))
    }

    pub(crate) async fn subscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Subscriber::Single(conn) => conn.subscribe(channel).await,
            Subscriber::Cluster(conn) => conn.ssubscribe(channel).await,
            Subscriber::Sentinel(conn) => conn.subscribe(channel).await,
        }
    }

    /// Makes sure the next request for `channel`'s slot goes to the slot's master now (a
    /// cluster): a keyed read of the channel's name (same slot) on the node the client last
    /// knew answers `MOVED` if that node lost the slot or became a replica, which redirects it
    /// and refreshes the client's slot map. A replica accepts `SSUBSCRIBE` but is not where
    /// `SPUBLISH` on its master reaches, so a resubscription must not go there.
    pub(crate) async fn follow_slot(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Subscriber::Cluster(conn) => {
                let _: Value = redis::cmd("EXISTS").arg(channel).query_async(conn).await?;
                Ok(())
            }
            Subscriber::Single(_) | Subscriber::Sentinel(_) => Ok(()),
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Subscriber::Single(conn) => conn.unsubscribe(channel).await,
            Subscriber::Cluster(conn) => conn.sunsubscribe(channel).await,
            Subscriber::Sentinel(conn) => conn.unsubscribe(channel).await,
        }
    }
}

impl Backend {
    /// The backend `config` describes (no connection is made yet).
    pub(crate) fn open(config: &Config) -> Result<Backend, Error> {
        let invalid = |url: &str, what: &str, e: &redis::RedisError| {
            let shown = redact_url(url);
            // The most common slip: a bare `host:port`.
            let hint = if url.contains("://") {
                format!("; {}", url_problem(url))
            } else {
                format!("; add `redis://` (or `rediss://` for TLS): `redis://{shown}/`")
            };
            Error::InvalidConfig {
                reason: format!("`{shown}` {what} ({}){hint}", describe(e)),
            }
        };
        let topology = if !config.sentinels.is_empty() {
            Topology::Sentinel(Arc::new(open_sentinels(config)?))
        } else if config.cluster_nodes.is_empty() {
            let info = config
                .url
                .as_str()
                .into_connection_info()
                .map_err(|e| invalid(&config.url, "is not a valid Redis URL", &e))?;
            let client = open_client(config, info)
                .map_err(|e| invalid(&config.url, "cannot be used", &e))?;
            Topology::Single(Box::new(client))
        } else {
            let mut nodes = Vec::with_capacity(config.cluster_nodes.len());
            for url in &config.cluster_nodes {
                let info = url
                    .as_str()
                    .into_connection_info()
                    .map_err(|e| invalid(url, "is not a valid Redis URL", &e))?;
                nodes.push(info);
            }
            #[cfg(feature = "tls")]
            let certificates = tls_certificates(config);
            let (connect, response) = (config.connect_timeout, config.response_timeout);
            let builder = move || {
                let builder = ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(connect)
                    .response_timeout(response)
                    // Redirects and a failover's slot refresh are retried within the call's
                    // own response timeout (which bounds every call).
                    .retries(16)
                    .min_retry_wait(10)
                    .max_retry_wait(200);
                #[cfg(feature = "tls")]
                let builder = match &certificates {
                    Some(certificates) => builder.certs(certificates.clone()),
                    None => builder,
                };
                builder
            };
            let commands = builder()
                .build()
                .map_err(|e| invalid(&config.url, "cannot be used as a cluster", &e))?;
            Topology::Cluster {
                commands: Box::new(commands),
                builder: Box::new(builder),
            }
        };
        #[cfg(feature = "tls")]
        if uses_tls(&config.url) {
            install_crypto_provider();
        }
        Ok(Backend {
            topology,
            connect_timeout: config.connect_timeout,
            response_timeout: config.response_timeout,
        })
    }

    /// True if a command connection that failed with `error` must be replaced (by
    /// [`Backend::lazy_command_link`]) to reach the right node again: a Sentinel master that
    /// dropped the connection or was demoted. Other backends reconnect by themselves.
    pub(crate) fn replace_link_after(&self, error: &redis::RedisError) -> bool {
        matches!(self.topology, Topology::Sentinel(_)) && follows_master_after(error)
    }

    /// True for a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster { .. })
    }

    /// True for one server given by its URL ([`Config::new`], or a RedLock master): not a
    /// cluster, not a master found through Sentinel.
    pub(crate) fn is_one_server(&self) -> bool {
        matches!(self.topology, Topology::Single(_))
    }

    /// The master switches seen so far (Sentinel; always 0 otherwise): a lease reply that
    /// arrives after a switch may come from a superseded master, and a lease confirmed before
    /// one must be confirmed again on the new master (see `watchdog`).
    pub(crate) fn switches(&self) -> u64 {
        match &self.topology {
            Topology::Sentinel(sentinels) => sentinels.switches(),
            _ => 0,
        }
    }

    /// `min_replicas` as the count to `WAIT` for: [`ALL_REPLICAS`] is the replicas the sentinels
    /// list as healthy for the master connected to (at least one); while they have not said
    /// yet (right after a switch), more than there can be, so the `WAIT` fails as unreplicated
    /// and the caller retries.
    pub(crate) fn replicas_to_wait_for(&self, replicas: usize) -> usize {
        match &self.topology {
            Topology::Sentinel(sentinels) if replicas == ALL_REPLICAS => sentinels
                .healthy_replicas()
                .map_or(MAX_REPLICAS + 1, |count| count.max(1)),
            _ => replicas,
        }
    }

    /// Woken at every master switch (Sentinel; `None` for a deployment without switches).
    pub(crate) fn watch_switches(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match &self.topology {
            Topology::Sentinel(sentinels) => Some(sentinels.subscribe_switches()),
            _ => None,
        }
    }

    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // One timer per call is enough: `Connection::call` bounds every call and decides
            // whether a timed-out connection must be replaced.
            .set_response_timeout(None)
            // No retry inside redis-rs: a failed reconnect fails its request at once, and the
            // next request reconnects from its own runtime. redis-rs shares one reconnect among
            // its callers, and a retry's backoff timer belongs to the runtime that started it: a
            // runtime that shut down left a timer that panics when another runtime polls it.
            // Every caller here retries transient failures itself (`wait`, a release's retries).
            .set_number_of_retries(0)
    }

    fn cluster_config(&self) -> ClusterConfig {
        ClusterConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(self.response_timeout)
    }

    /// The command connection, connected.
    ///
    /// To one server it is made on the caller's runtime (see `background` for why); a cluster
    /// connection is made on the client's runtime thread, because its driver task (which owns
    /// every node's connection) does not come back once its runtime is gone.
    pub(crate) async fn command_link(&self, background: &Background) -> RedisResult<Link> {
        match &self.topology {
            Topology::Single(client) => {
                ConnectionManager::new_with_config((**client).clone(), self.manager_config())
                    .await
                    .map(Link::Single)
            }
            Topology::Cluster { commands, .. } => {
                let connect = commands.get_async_connection_with_config(self.cluster_config());
                background.enter(connect).await.map(Link::Cluster)
            }
            Topology::Sentinel(sentinels) => {
                MasterLink::lazy(sentinels.clone(), background.clone())
                    .connected()
                    .await
                    .map(Link::Sentinel)
            }
        }
    }

    /// A fresh command connection that connects on first use (replacing one that cannot be
    /// trusted any more).
    pub(crate) fn lazy_command_link(&self, background: &Background) -> RedisResult<Link> {
        match &self.topology {
            Topology::Single(client) => {
                ConnectionManager::new_lazy_with_config((**client).clone(), self.manager_config())
                    .map(Link::Single)
            }
            Topology::Cluster { commands, .. } => {
                let _entered = background.handle().enter();
                let link = commands.get_pending_async_connection_with_config(self.cluster_config());
                Ok(Link::Cluster(link))
            }
            Topology::Sentinel(sentinels) => Ok(Link::Sentinel(MasterLink::lazy(
                sentinels.clone(),
                background.clone(),
            ))),
        }
    }

    /// A short-lived connection, for an occasional write or a health probe.
    pub(crate) async fn fresh_link(&self) -> RedisResult<Link> {
        match &self.topology {
            Topology::Single(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(Some(self.response_timeout));
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map(Link::Plain)
            }
            Topology::Cluster { commands, .. } => commands
                .get_async_connection_with_config(self.cluster_config())
                .await
                .map(Link::Cluster),
            Topology::Sentinel(sentinels) => sentinels
                .connect_master(ProtocolVersion::RESP2, None)
                .await
                .map(Link::Plain),
        }
    }

    /// The subscriber connection (RESP3), made with the client's runtime current; every push
    /// (messages, subscription confirmations, disconnections) goes to `pushes`.
    pub(crate) async fn subscriber(&self, pushes: impl AsyncPushSender) -> RedisResult<Subscriber> {
        match &self.topology {
            Topology::Single(client) => {
                let (client, config) = self.single_subscriber(client, pushes)?;
                ConnectionManager::new_with_config(client, config)
                    .await
                    .map(Subscriber::Single)
            }
            Topology::Cluster { builder, .. } => {
                let client = builder()
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(pushes)
                    .build()?;
                client
                    .get_async_connection_with_config(self.cluster_config())
                    .await
                    .map(Subscriber::Cluster)
            }
            Topology::Sentinel(sentinels) => MasterSubscriber::connect(sentinels.clone(), pushes)
                .await
                .map(Subscriber::Sentinel),
        }
    }
}

impl Backend {
    /// The subscriber connection to one server (a RedLock master), made with the client's
    /// runtime current like [`Backend::subscriber`], but connecting on first use: the master
    /// may be down now and back later (each use tries again).
    pub(crate) fn lazy_subscriber(&self, pushes: impl AsyncPushSender) -> RedisResult<Subscriber> {
        match &self.topology {
            Topology::Single(client) => {
                let (client, config) = self.single_subscriber(client, pushes)?;
                ConnectionManager::new_lazy_with_config(client, config).map(Subscriber::Single)
            }
            Topology::Cluster { .. } | Topology::Sentinel(_) => Err((
                redis::ErrorKind::Client,
                "a lazy subscriber is made to one server only",
            )
                .into()),
        }
    }

    /// The RESP3 client and connection settings of a subscriber to one server: every push goes
    /// to `pushes`, channels are subscribed again after a reconnect.
    fn single_subscriber(
        &self,
        client: &redis::Client,
        pushes: impl AsyncPushSender,
    ) -> RedisResult<(redis::Client, ConnectionManagerConfig)> {
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(2)
            .set_automatic_resubscription()
            .set_push_sender(pushes);
        Ok((client, config))
    }
}

/// The redis-rs client for one server, with the configured TLS certificates (feature `tls`)
/// for a `rediss://` URL. Every connection made from it (the command connection, the
/// subscriber, the identity refresh) carries them: they live in its connection info.
fn open_client(config: &Config, info: redis::ConnectionInfo) -> RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    if let (redis::ConnectionAddr::TcpTls { .. }, Some(certificates)) =
        (info.addr(), tls_certificates(config))
    {
        return redis::Client::build_with_tls(info, certificates);
    }
    let _ = config;
    redis::Client::open(info)
}

/// The sentinels of `config`, each URL checked; the master's credentials from
/// [`Config::sentinel_master_auth`], its TLS mode from the sentinels' scheme.
fn open_sentinels(config: &Config) -> Result<Sentinels, Error> {
    let invalid = |url: &str, e: &redis::RedisError| Error::InvalidConfig {
        reason: format!(
            "`{}` is not a valid Sentinel URL: {}",
            redact_url(url),
            describe(e)
        ),
    };
    let mut sentinels = Vec::with_capacity(config.sentinels.len());
    for url in &config.sentinels {
        sentinels.push(
            url.as_str()
                .into_connection_info()
                .map_err(|e| invalid(url, &e))?,
        );
    }
    let mut master = RedisConnectionInfo::default();
    if let Some((username, password)) = &config.sentinel_master_auth {
        master = master.set_password(password);
        if !username.is_empty() {
            master = master.set_username(username);
        }
    }
    let config_for_tls = config.clone();
    let open = move |info: redis::ConnectionInfo| open_client(&config_for_tls, info);
    let timeouts = (config.connect_timeout, config.response_timeout);
    Sentinels::new(
        sentinels,
        &config.sentinel_service,
        master,
        Box::new(open),
        config.address_map()?,
        timeouts,
    )
    .map_err(|e| invalid(&config.url, &e))
}

/// The certificates `config` names, if any.
#[cfg(feature = "tls")]
fn tls_certificates(config: &Config) -> Option<redis::TlsCertificates> {
    if config.tls_root_certificates.is_none() && config.tls_client_certificate.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: config.tls_client_certificate.as_ref().map(|(cert, key)| {
            redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }
        }),
        root_cert: config.tls_root_certificates.clone(),
    })
}

/// rustls needs one process-wide crypto provider: ring, unless the application installed
/// another first (then that one is used, and this does nothing).
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A redis-rs error's category and detail; never the URL it was parsing.
pub(crate) fn describe(e: &redis::RedisError) -> String {
    match e.detail() {
        Some(detail) => format!("{}: {detail}", e.category()),
        None => e.category().to_owned(),
    }
}
