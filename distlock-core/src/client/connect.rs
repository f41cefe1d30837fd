//! Connecting a client: its runtime, its deployment (one command connection, or a RedLock
//! quorum's masters) checked and set up (the server answers, the scripts loaded, the eviction
//! policy looked at), its identity record, its checks, watchdog, waiters and group commit.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::background::Background;
use crate::client::batch::Batcher;
use crate::client::identity;
use crate::client::state::{settle_bound, Client, Inner};
use crate::client::waiting::Waiters;
use crate::client::watchdog::{Batching, Watchdog};
use crate::config::Config;
use crate::deploy::backend::{Backend, Link};
use crate::deploy::connection::Connection;
use crate::deploy::redlock;
use crate::deploy::redlock::count;
use crate::deploy::server_check::ServerCheck;
use crate::deploy::Deployment;
use crate::error::{is_error_reply, Error};
use crate::wire::request;
use crate::wire::scripts;

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
        Some(error) if left < count::majority(masters) => Err(error),
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
