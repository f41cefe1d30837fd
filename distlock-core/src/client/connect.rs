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
use crate::config::{redact_url, Config};
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
    ///
    /// The deployment is checked first: the server answers (a missing or wrong password fails
    /// here, [`Error::Connect`]), and a URL of one server ([`Config::new`], a RedLock master)
    /// that reaches a Redis Cluster node fails with [`Error::InvalidConfig`] naming
    /// [`Config::cluster`], before any lock is taken. The node is asked `INFO cluster`, and
    /// `EXISTS` of two lock keys in different hash slots (which a node refuses, `CROSSSLOT`) for
    /// a user that may not run `INFO`; a user refused both connects, unchecked.
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
                // Only a URL of one server can be a Cluster node given by mistake (a Sentinel
                // master never is one; a cluster's connection reaches nodes by design).
                let one_server = backend.is_one_server().then(|| OneServer {
                    url: config.redacted_url(),
                    of_redlock: false,
                });
                check_server(conn.clone(), &config, one_server).await?;
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

/// The server a connection to one URL reached (`Config::new`'s, or a RedLock master's),
/// which must not be a Redis Cluster node (see [`cluster_node`]).
struct OneServer {
    /// Its URL, password redacted.
    url: String,
    /// True for a RedLock master.
    of_redlock: bool,
}

/// The checks and set-up of a fresh connection: the server must answer (see [`reach`]: a
/// missing password fails here), a URL of one server must not reach a Redis Cluster node (see
/// [`cluster_node`]), the scripts are loaded, and the eviction policy is looked at.
async fn check_server(
    conn: Link,
    config: &Config,
    one_server: Option<OneServer>,
) -> Result<(), Error> {
    let timeout = config.response_timeout;
    reach(conn.clone(), config).await?;
    if let Some(server) = one_server {
        if cluster_node(conn.clone(), &config.key_prefix, timeout).await == Some(true) {
            return Err(cluster_node_given_as_one_server(&server));
        }
    }
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
/// is down; those masters connect when they are back. A master that is a Redis Cluster node
/// is a configuration's mistake, not an outage: it fails the connect whatever the others do.
async fn check_masters(links: &[(Link, Arc<Backend>)], config: &Config) -> Result<(), Error> {
    let masters = links.len();
    let checks = links
        .iter()
        .zip(&config.redlock_masters)
        .map(|((link, _), url)| {
            let master = OneServer {
                url: redact_url(url),
                of_redlock: true,
            };
            check_server(link.clone(), config, Some(master))
        });
    let mut refused: Vec<Error> = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    if let Some(mistake) = refused
        .iter()
        .position(|e| matches!(e, Error::InvalidConfig { .. }))
    {
        return Err(refused.swap_remove(mistake));
    }
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

/// Whether the server behind a connection to one URL is a Redis Cluster node (`None`: it would
/// not say). One round trip, two questions, so that every user a lock works for gets an
/// answer: `INFO cluster` (`cluster_enabled:1`), which the ACL user of the optional checks
/// may run, and `EXISTS` of two lock keys in different hash slots, which every lock's user
/// may run: a Cluster node refuses it (`CROSSSLOT`, or `CLUSTERDOWN` while a slot has no
/// master), one server counts them. A refusal of both (an ACL without `INFO` or the lock
/// keys) or no answer within `timeout` is not knowing, and the connect goes on: the locks
/// report what goes wrong then.
async fn cluster_node(mut conn: Link, prefix: &str, timeout: Duration) -> Option<bool> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("INFO").arg("cluster");
    pipe.cmd("EXISTS")
        .arg(&CLUSTER_PROBES.map(|name| format!("{prefix}:{{{name}}}")));
    let replies = pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut conn);
    let mut replies = match tokio::time::timeout(timeout, replies).await {
        Ok(Ok(replies)) => replies.into_iter(),
        _ => return None,
    };
    let info = replies.next().and_then(Result::ok);
    let enabled = info
        .and_then(|info| redis::from_redis_value::<String>(info).ok())
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix("cluster_enabled:"))
                .map(|enabled| enabled.trim() == "1")
        });
    enabled.or(match replies.next() {
        Some(Ok(_)) => Some(false),
        Some(Err(refused)) => CLUSTER_REFUSALS
            .contains(&refused.code().unwrap_or_default())
            .then_some(true),
        None => None,
    })
}

/// Two lock names in different hash slots (a test checks it), for [`cluster_node`]'s `EXISTS`.
const CLUSTER_PROBES: [&str; 2] = ["cluster-probe-a", "cluster-probe-b"];

/// The refusals only a Redis Cluster node gives a keyed command.
const CLUSTER_REFUSALS: [&str; 5] = ["CROSSSLOT", "MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN"];

/// The error of a URL of one server that reached a Redis Cluster node, naming the fix.
fn cluster_node_given_as_one_server(server: &OneServer) -> Error {
    let url = &server.url;
    let redirects = "a Cluster node answers only for its own hash slots, redirecting the others (`MOVED`), and refuses keys of several slots in one call (`CROSSSLOT`)";
    let reason = if server.of_redlock {
        format!(
            "the RedLock master `{url}` is a Redis Cluster node: RedLock takes independent masters, each one server, and {redirects}; to lock in a Redis Cluster, configure the cluster instead of a quorum: `Config::cluster([\"{url}\"])` (any of its nodes, or several; the client finds the rest), `DISTLOCK_CLUSTER_NODES` in the environment, `cluster_nodes` in a configuration file"
        )
    } else {
        format!(
            "`{url}` is a Redis Cluster node, but the configuration names one server (`Config::new`, `DISTLOCK_URL`, `url`): {redirects}, so locks would fail; configure the cluster instead: `Config::cluster([\"{url}\"])` (any of its nodes, or several; the client finds the rest), `DISTLOCK_CLUSTER_NODES={url}` in the environment, `cluster_nodes = [\"{url}\"]` in a configuration file"
        )
    };
    Error::InvalidConfig { reason }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::keys::hash_slot;

    #[test]
    fn the_cluster_probes_lie_in_different_slots() {
        let [a, b] =
            CLUSTER_PROBES.map(|name| hash_slot(format!("distlock:{{{name}}}").as_bytes()));
        assert_ne!(a, b);
    }

    #[test]
    fn a_cluster_node_given_as_one_server_is_told_the_fix() {
        let url = "redis://127.0.0.1:7000/".to_owned();
        let one = cluster_node_given_as_one_server(&OneServer {
            url: url.clone(),
            of_redlock: false,
        })
        .to_string();
        assert!(one.contains("is a Redis Cluster node"), "{one}");
        assert!(
            one.contains(&format!("`Config::cluster([\"{url}\"])`")),
            "{one}"
        );
        assert!(one.contains("DISTLOCK_CLUSTER_NODES"), "{one}");
        let master = cluster_node_given_as_one_server(&OneServer {
            url,
            of_redlock: true,
        })
        .to_string();
        assert!(
            master.contains("RedLock takes independent masters"),
            "{master}"
        );
    }
}
