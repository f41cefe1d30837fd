//! Client configuration: where Redis is, how keys are named, and the timing defaults.

pub(crate) mod duration;
mod redact;
pub(crate) mod source;
mod url_problem;

pub(crate) use redact::{redact_url, uses_tls};
pub(crate) use url_problem::url_problem;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::error::Error;
use crate::lease::{check_ttl, MAX_TTL};
use crate::wire::keys::validate_prefix;

/// How to reach Redis and the defaults for locks taken through the client.
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::Error> {
/// use std::time::Duration;
/// distlock::Config::new("redis://:secret@127.0.0.1:6379/")
///     .key_prefix("payments-lock")
///     .default_ttl(Duration::from_secs(10))
///     .response_timeout(Duration::from_millis(500))
///     .install_as("payments")
///     .await?;
/// # Ok(()) }
/// ```
///
/// `Debug` never shows the password from the URL.
#[derive(Clone)]
pub struct Config {
    pub(crate) url: String,
    /// Seed nodes of a Redis Cluster (empty: one server, `url`).
    pub(crate) cluster_nodes: Vec<String>,
    /// Sentinels of a Sentinel deployment (empty: not one).
    pub(crate) sentinels: Vec<String>,
    /// Independent masters of a RedLock quorum (empty: not one; see `quorum`).
    pub(crate) redlock_masters: Vec<String>,
    /// The service (master name) the sentinels watch.
    pub(crate) sentinel_service: String,
    /// The master's user name (empty: the default user) and password, behind Sentinel.
    pub(crate) sentinel_master_auth: Option<(String, String)>,
    /// Addresses the sentinels name, and where to reach each instead (`host:port` both).
    pub(crate) sentinel_address_map: Vec<(String, String)>,
    pub(crate) key_prefix: String,
    pub(crate) default_ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) fence_retention: Duration,
    pub(crate) renew_batch: usize,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) require_noeviction: bool,
    pub(crate) min_replicas: usize,
    pub(crate) replica_timeout: Duration,
    /// How often the servers' clocks are read for steps (`None`: never).
    pub(crate) server_check: Option<Duration>,
    /// PEM certificates of the CAs to trust for `rediss://` instead of the system's store.
    pub(crate) tls_root_certificates: Option<Vec<u8>>,
    /// PEM certificate and private key this client presents (mutual TLS).
    pub(crate) tls_client_certificate: Option<(Vec<u8>, Vec<u8>)>,
}

impl Config {
    /// A configuration for the Redis server at `url` (`redis://[:password@]host[:port][/db]`),
    /// with the defaults: key prefix `distlock`, ttl 30 s, connect timeout 5 s, response timeout
    /// 2 s, fence retention 10 min, renewal batches of 256, no cap on hold time, no replica
    /// acknowledgement (replica timeout 500 ms when asked for), the servers' clocks checked
    /// every 250 ms.
    pub fn new(url: impl Into<String>) -> Self {
        Config {
            url: url.into(),
            cluster_nodes: Vec::new(),
            sentinels: Vec::new(),
            redlock_masters: Vec::new(),
            sentinel_service: String::new(),
            sentinel_master_auth: None,
            sentinel_address_map: Vec::new(),
            key_prefix: "distlock".to_owned(),
            default_ttl: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(2),
            fence_retention: Duration::from_secs(600),
            renew_batch: 256,
            max_hold: None,
            require_noeviction: false,
            min_replicas: 0,
            replica_timeout: Duration::from_millis(500),
            server_check: Some(Duration::from_millis(250)),
            tls_root_certificates: None,
            tls_client_certificate: None,
        }
    }

    /// A configuration for a Redis Cluster, reached through these seed nodes
    /// (`redis://[:password@]host:port`, any of its masters or replicas; the client discovers
    /// the rest), with the same defaults as [`Config::new`].
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// distlock::Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .install()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Every key of one lock shares a hash slot, so each lock lives on one shard: acquire,
    /// release and renewal are single-shard requests (renewal batches are grouped per slot),
    /// `MOVED`/`ASK` are followed, and waiters subscribe with sharded pub/sub (`SSUBSCRIBE`)
    /// on the lock's shard. See the crate docs, "Deployments", for what a lock guarantees
    /// under failover.
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
        Config {
            cluster_nodes: nodes.clone(),
            ..Config::new(nodes.into_iter().next().unwrap_or_default())
        }
    }

    /// A configuration for the RedLock algorithm over independent Redis masters (URLs, no
    /// replication between them; 3 or 5 are usual): a lock is taken only if a majority of the
    /// masters grant it within its validity time (ttl minus the time the acquire took minus
    /// the lease margin), renewed and released by majority, and released again everywhere
    /// when no majority was reached (which fails with [`Error::NoQuorum`] if too few masters
    /// answered). A fenced lock's token is strictly larger than every earlier quorum holder's
    /// (two more rounds: see the crate docs). Shared (read) holds count by majority too; a
    /// semaphore's permit of `n` needs `⌊n·m/(n+1)⌋ + 1` of the `m` masters (acquire and
    /// renewal: see [`crate::semaphore`]), so 2 permits over 5 masters need 4 of them up.
    /// [`Config::connect`] succeeds while a majority of
    /// the masters answers (a minority may be down; they are used when they are back) and
    /// fails with [`Error::Connect`] or [`Error::ConnectTimeout`] otherwise. See the crate
    /// docs, "Deployments", for what this guarantees and what it does not.
    pub fn redlock<I, S>(masters: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let masters: Vec<String> = masters.into_iter().map(Into::into).collect();
        Config {
            redlock_masters: masters.clone(),
            ..Config::new(masters.into_iter().next().unwrap_or_default())
        }
    }

    /// A configuration for a master watched by Redis Sentinel: the sentinels' URLs
    /// (`redis://[:password@]host:port`, the password being the sentinels' own if they ask
    /// for one; `rediss://` with the `tls` feature) and the name they know the master by
    /// (`sentinel monitor <service_name> ...`), with the same defaults as [`Config::new`].
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// distlock::Config::sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "locks",
    /// )
    /// .sentinel_master_auth("", "master-secret")
    /// .min_replicas(1)
    /// .install()
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// The client asks the sentinels, in order, for the master's address
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and uses the first address whose server says it is
    /// the master (`ROLE`). After a failover it finds the new master by itself: the command
    /// connection when it is dropped (Sentinel disconnects the clients of the nodes it
    /// reconfigures) or answered `READONLY` (a demoted master); the release subscriber as soon
    /// as its connection drops, subscribing again to every channel its waiters listen on. Each
    /// search is bounded by the connect and response timeouts. The master is reached with the
    /// sentinels' scheme (`rediss://` sentinels: TLS to the master too, with the same
    /// certificates) and with [`Config::sentinel_master_auth`]'s credentials, database 0.
    /// See the crate docs, "Deployments", for what a lock guarantees under failover.
    pub fn sentinel<I, S>(sentinels: I, service_name: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let sentinels: Vec<String> = sentinels.into_iter().map(Into::into).collect();
        Config {
            sentinels: sentinels.clone(),
            sentinel_service: service_name.into(),
            ..Config::new(sentinels.into_iter().next().unwrap_or_default())
        }
    }

    /// The credentials of the master (and its replicas) behind [`Config::sentinel`]: a user
    /// name (`""` for the default user, `AUTH <password>`) and a password. The sentinels' own
    /// password, if they ask for one, goes in their URLs. Never logged or shown by `Debug`.
    pub fn sentinel_master_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.sentinel_master_auth = Some((username.into(), password.into()));
        self
    }

    /// Where to reach the servers the sentinels name, when this client cannot reach them at
    /// those addresses: each pair maps an address a sentinel announces (`host:port`, as in
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`) to the one to connect to instead (`host:port`). The
    /// servers behind NAT, port forwarding or a container network (Redisson's `natMapper`,
    /// ioredis' `natMap`); an address not in the map is used as announced. Calling it again
    /// adds pairs.
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// distlock::Config::sentinel(["redis://127.0.0.1:26379"], "locks")
    ///     .sentinel_address_map([
    ///         ("10.0.0.5:6379", "127.0.0.1:16379"),
    ///         ("10.0.0.6:6379", "127.0.0.1:16380"),
    ///     ])
    ///     .install()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Only where the client connects changes: the master is still the one the sentinels name
    /// (compared by its announced address), confirmed by `ROLE` at the mapped address. A
    /// mapped address reaches its server with the sentinels' scheme, like an announced one.
    /// [`Config::validate`] refuses a pair that is not two `host:port` (an IPv6 host in
    /// brackets), an address mapped twice, and a map on anything but [`Config::sentinel`] (a
    /// cluster's or a server's addresses are the URLs given).
    pub fn sentinel_address_map<I, A, B>(mut self, pairs: I) -> Self
    where
        I: IntoIterator<Item = (A, B)>,
        A: Into<String>,
        B: Into<String>,
    {
        self.sentinel_address_map
            .extend(pairs.into_iter().map(|(from, to)| (from.into(), to.into())));
        self
    }

    /// The address map, read ([`Config::sentinel_address_map`]).
    pub(crate) fn address_map(&self) -> Result<AddressMap, Error> {
        let mut map = HashMap::new();
        for (from, to) in &self.sentinel_address_map {
            let read = |text: &str| {
                parse_address(text).ok_or_else(|| Error::InvalidConfig {
                    reason: format!(
                        "sentinel_address_map: `{text}` is not a `host:port` address (an IPv6 host in brackets: `[::1]:6379`)"
                    ),
                })
            };
            if map.insert(read(from)?, read(to)?).is_some() {
                return Err(Error::InvalidConfig {
                    reason: format!(
                        "sentinel_address_map maps `{from}` twice: give one address for each"
                    ),
                });
            }
        }
        Ok(map)
    }

    /// Prefix of every Redis key and channel this client creates (default `distlock`).
    /// Must be 1–128 bytes without `{` or `}`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Lease length for locks that do not set their own `ttl` (default 30 s).
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long to wait for a TCP connection and handshake (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long any single Redis operation may take before it fails with
    /// [`Error::Timeout`] (default 2 s). A hung server never hangs a caller longer than this.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a lock name's last fencing token is remembered after its last acquisition
    /// (default 10 min; never less than the lock's ttl), and a leader election's record after
    /// its last leader (a leader renews its record every third of this). See the crate docs
    /// on fencing.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// Most leases renewed by one renewal script call (default 256).
    pub fn renew_batch_size(mut self, size: usize) -> Self {
        self.renew_batch = size;
        self
    }

    /// Cap on the total time a renewed lock may be held (default: no cap). When the cap is
    /// reached the watchdog stops renewing and the lock is lost when its lease runs out.
    pub fn max_hold(mut self, cap: Duration) -> Self {
        self.max_hold = Some(cap);
        self
    }

    /// Refuse to connect to a server whose `maxmemory-policy` is not `noeviction` (default:
    /// connect, and warn once through `tracing`).
    ///
    /// Lock keys carry a ttl, so the `volatile-*` policies evict them first, and `allkeys-*`
    /// may too: an evicted lock is free for anyone while its holder learns of it only at its
    /// next renewal (or, without renewal, never). With this set, [`Config::connect`] and the
    /// install methods fail with [`Error::EvictionPolicy`]. A server that does not let the
    /// client read its configuration (`CONFIG GET` refused) is accepted either way.
    pub fn require_noeviction(mut self, require: bool) -> Self {
        self.require_noeviction = require;
        self
    }

    /// Replicas that must acknowledge every acquire and renewal of the locks taken through
    /// this client (default 0: none; a lock may ask for its own with
    /// [`LockBuilder::min_replicas`](crate::LockBuilder::min_replicas)).
    ///
    /// After the lock is written, the same round trip runs `WAIT n timeout` on the lock's own
    /// node (in a cluster, the master of its slot). If fewer than `n` replicas acknowledge within
    /// [`Config::replica_timeout`], the acquire releases the lock again and fails with
    /// [`Error::Unreplicated`], which says how many did; a renewal that too few acknowledge
    /// counts as a failed renewal (retried; if that lasts until the lease runs out, the lock is
    /// lost with [`LossReason::Unreplicated`](crate::LossReason::Unreplicated)).
    ///
    /// Over Redis Sentinel, [`ALL_REPLICAS`] waits for every replica a failover could promote
    /// instead of a count (see its docs).
    ///
    /// What it buys: a lock acknowledged by `n` replicas survives the failover of its master to
    /// any of them (Redis promotes the most up-to-date replica). What it does not: `WAIT` makes
    /// replication synchronous for this write only, it is not consensus; a failover to a
    /// replica that had not acknowledged (more masters lost than `n` covers) can still lose the
    /// lock. Fencing tokens remain what protects the resource.
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// distlock::Config::new("redis://127.0.0.1:6379/")
    ///     .min_replicas(1)
    ///     .replica_timeout(Duration::from_millis(200))
    ///     .install()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn min_replicas(mut self, replicas: usize) -> Self {
        self.min_replicas = replicas;
        self
    }

    /// How long `WAIT` waits for the replicas of [`Config::min_replicas`] (default 500 ms; at
    /// least 1 ms). While it waits, other requests of this client queue behind it on the
    /// command connection, so keep it short: a healthy replica acknowledges within a
    /// millisecond or two of its link's round trip.
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.replica_timeout = timeout;
        self
    }

    /// How often the client checks each server for what silently voids its locks: a step
    /// forward of its wall clock, and a restart (default every 250 ms; `None`: never; at least
    /// 10 ms).
    ///
    /// Redis keeps a key's expiry as a wall-clock date, so a server whose clock steps forward
    /// (`date -s`, an NTP step, a VM resumed from a snapshot) expires every lock on it that much
    /// early; a server that restarts comes back without the locks taken since its last snapshot
    /// (all of them without persistence). Either way another client can take a lock whose
    /// holder still believes it holds it. No client can prevent that; with this check, a step
    /// of more than ~20 ms (plus the round trips of the two reads) or a new run id (`INFO
    /// server`) is noticed within one period and every lease of the client is confirmed on the
    /// server at once: a holder whose lock is gone is told (its lease is lost, `run` cancels the
    /// body), instead of at its next renewal or never. The check costs each server one `TIME`
    /// and one `INFO server`, pipelined, per period per client (a user whose ACL refuses `INFO`,
    /// part of `@dangerous`, gets the clock check only). Keep the servers' clocks slewed, not
    /// stepped (NTP's default for small offsets, `chrony` with `makestep` off once synced).
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// let client = distlock::Config::new("redis://127.0.0.1:6379/")
    ///     .server_check(Some(Duration::from_millis(100)))
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn server_check(mut self, every: Option<Duration>) -> Self {
        self.server_check = every;
        self
    }

    /// Trust these CA certificates (PEM, one or more) for a `rediss://` server instead of the
    /// system's trust store: a private CA, as managed Redis services and test set-ups use.
    /// `rediss://` needs the `tls` feature.
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt").expect("CA certificate");
    /// distlock::Config::new("rediss://:secret@redis.internal:6380/")
    ///     .tls_root_certificates(ca)
    ///     .install()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Without it, `rediss://` servers are verified against the system's trust store (the
    /// platform's native roots). `rediss://host/#insecure` skips verification entirely: for
    /// experiments only, never in production.
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificates = Some(pem.into());
        self
    }

    /// Present this certificate and private key (both PEM) to a `rediss://` server that
    /// authenticates its clients (mutual TLS; `redis-server`'s default `tls-auth-clients yes`).
    /// `rediss://` needs the `tls` feature. Neither is ever logged or shown by `Debug`.
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        private_key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls_client_certificate = Some((certificate_pem.into(), private_key_pem.into()));
        self
    }

    /// Checks every setting against its limits (see [`crate::MIN_TTL`], [`crate::MAX_TTL`]):
    /// what connecting checks first, for a configuration read at start-up (a flag, a file)
    /// that should fail before anything connects. [`Config::from_env`] and the `serde`
    /// `Deserialize` implementation call it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first setting out of its limits.
    pub fn validate(&self) -> Result<(), Error> {
        validate_prefix(&self.key_prefix)?;
        let invalid = |reason: &str| {
            Err(Error::InvalidConfig {
                reason: reason.into(),
            })
        };
        check_ttl(|| "default_ttl", self.default_ttl)?;
        if self.fence_retention > MAX_TTL {
            return invalid("fence_retention must be at most 30 days");
        }
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return invalid("timeouts must be greater than zero");
        }
        if self.renew_batch == 0 {
            return invalid("renew_batch_size must be at least 1");
        }
        if self.url.is_empty() {
            return invalid("no Redis URL: give the server's URL (or, for `Config::cluster`, at least one seed node; for `Config::sentinel`, at least one sentinel; for `Config::redlock`, at least one master)");
        }
        if self.sentinel_master_auth.is_some() && self.sentinels.is_empty() {
            return invalid("sentinel_master_auth applies to `Config::sentinel` only (a server's or a cluster's password goes in its URL)");
        }
        if !self.sentinel_address_map.is_empty() && self.sentinels.is_empty() {
            return invalid("sentinel_address_map applies to `Config::sentinel` only (the addresses of a server, a cluster or RedLock masters are the URLs given)");
        }
        self.address_map()?;
        if !self.sentinels.is_empty() && self.sentinel_service.trim().is_empty() {
            return invalid("no Sentinel service name: give the name the sentinels know the master by (`sentinel monitor <name> ...`)");
        }
        if !self.redlock_masters.is_empty()
            && (!self.cluster_nodes.is_empty() || !self.sentinels.is_empty())
        {
            return invalid("`Config::redlock` takes independent masters: it cannot be combined with a cluster or Sentinel");
        }
        let mut masters: Vec<&str> = self.redlock_masters.iter().map(String::as_str).collect();
        masters.sort_unstable();
        if masters.windows(2).any(|pair| pair[0] == pair[1]) {
            return invalid("`Config::redlock` names the same master twice: it would count twice towards the majority");
        }
        if !self.redlock_masters.is_empty() && self.min_replicas > 0 {
            return invalid("min_replicas does not apply to `Config::redlock` (its masters have no replicas to wait for)");
        }
        if self.replica_timeout < Duration::from_millis(1) {
            return invalid(
                "replica_timeout must be at least 1 ms (`WAIT` with 0 would wait forever)",
            );
        }
        if self
            .server_check
            .is_some_and(|every| every < Duration::from_millis(10))
        {
            return invalid("server_check must be at least 10 ms (or `None`: never)");
        }
        if self.min_replicas > MAX_REPLICAS && self.min_replicas != ALL_REPLICAS {
            return invalid("min_replicas must be at most 1000, or ALL_REPLICAS");
        }
        if self.min_replicas == ALL_REPLICAS && self.sentinels.is_empty() {
            return invalid(ALL_NEEDS_SENTINEL);
        }
        let urls = std::iter::once(&self.url)
            .chain(&self.cluster_nodes)
            .chain(&self.sentinels)
            .chain(&self.redlock_masters);
        if !cfg!(feature = "tls") && urls.into_iter().any(|url| uses_tls(url)) {
            return invalid("a `rediss://` URL needs TLS: enable the `tls` feature of distlock");
        }
        Ok(())
    }

    /// The URL with any password replaced by `***`, safe for logs and errors.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// What a client of this configuration connects to, for errors (passwords replaced by
    /// `***`): the URL, the cluster's seed nodes, the Sentinel service and its sentinels, or
    /// the RedLock masters.
    pub(crate) fn target(&self) -> String {
        let list = |urls: &[String]| {
            let shown: Vec<String> = urls.iter().map(|u| redact_url(u)).collect();
            shown.join(", ")
        };
        if !self.sentinels.is_empty() {
            format!(
                "the master of `{}` through the sentinels {}",
                self.sentinel_service,
                list(&self.sentinels)
            )
        } else if !self.cluster_nodes.is_empty() {
            format!("the Redis Cluster of {}", list(&self.cluster_nodes))
        } else if !self.redlock_masters.is_empty() {
            format!(
                "a majority of the RedLock masters {}",
                list(&self.redlock_masters)
            )
        } else {
            self.redacted_url()
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("url", &self.redacted_url());
        if !self.cluster_nodes.is_empty() {
            let nodes: Vec<String> = self.cluster_nodes.iter().map(|n| redact_url(n)).collect();
            d.field("cluster_nodes", &nodes);
        }
        if !self.redlock_masters.is_empty() {
            let masters: Vec<String> = self.redlock_masters.iter().map(|n| redact_url(n)).collect();
            d.field("redlock_masters", &masters);
        }
        if !self.sentinels.is_empty() {
            let sentinels: Vec<String> = self.sentinels.iter().map(|n| redact_url(n)).collect();
            d.field("sentinels", &sentinels)
                .field("sentinel_service", &self.sentinel_service)
                .field(
                    "sentinel_master_auth",
                    &self
                        .sentinel_master_auth
                        .as_ref()
                        .map(|(user, _)| format!("{user}:***")),
                );
            if !self.sentinel_address_map.is_empty() {
                d.field("sentinel_address_map", &self.sentinel_address_map);
            }
        }
        d.field("key_prefix", &self.key_prefix)
            .field("default_ttl", &self.default_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("fence_retention", &self.fence_retention)
            .field("renew_batch", &self.renew_batch)
            .field("server_check", &self.server_check)
            .field("max_hold", &self.max_hold)
            .field("require_noeviction", &self.require_noeviction)
            .field("min_replicas", &self.min_replicas)
            .field("replica_timeout", &self.replica_timeout);
        d.field(
            "tls_root_certificates",
            &self.tls_root_certificates.as_ref().map(|_| "<set>"),
        )
        .field(
            "tls_client_certificate",
            &self.tls_client_certificate.as_ref().map(|_| "<set>"),
        );
        d.finish()
    }
}

/// The most replicas a lock may ask to acknowledge it (a typo guard; no deployment has more).
pub(crate) const MAX_REPLICAS: usize = 1000;

/// Why `ALL_REPLICAS` is refused elsewhere than over Sentinel.
pub(crate) const ALL_NEEDS_SENTINEL: &str = "min_replicas = ALL_REPLICAS needs Redis Sentinel (`Config::sentinel`): the sentinels say which replicas a failover could promote; elsewhere give a count";

/// `min_replicas(ALL_REPLICAS)`: every replica of the lock's master must acknowledge the acquire
/// and each renewal — every replica the sentinels list as healthy (listed as a replica, not
/// down or disconnected, its link to the master up; at least one), asked every 500 ms and
/// after each switch. Redis Sentinel only (`Config::sentinel`).
///
/// What it buys over a count: a renewal is counted only once every replica that a failover
/// could promote has it, so the holder's deadline is never later than the promoted replica's
/// copy of the key; and unlike a count equal to the number of replicas, a lock survives a
/// planned failover (`SENTINEL FAILOVER`): the old master, not yet a replica again, is not
/// waited for. What it costs: while a replica is healthy but slow, acquires and renewals wait
/// for it (up to `Config::replica_timeout`). See the crate docs ("Deployments").
pub const ALL_REPLICAS: usize = usize::MAX;

/// Where to reach each address the sentinels announce (host and port both sides).
pub(crate) type AddressMap = HashMap<(String, u16), (String, u16)>;

/// `host:port` (`[v6]:port`) as a host and a port; `None` when it is not one.
fn parse_address(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.trim().rsplit_once(':')?;
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.strip_suffix(']')?,
        None if host.contains(':') => return None,
        None => host,
    };
    let port = port.parse().ok()?;
    (!host.is_empty() && port != 0).then(|| (host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let c = Config::new("redis://alice:hunter2@10.0.0.1:6380/2?protocol=resp3");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("redis://alice:***@10.0.0.1:6380/2"),
            "{shown}"
        );
        let only_pass = format!("{:?}", Config::new("redis://:s3cret@host/"));
        assert!(!only_pass.contains("s3cret") && only_pass.contains("redis://:***@host/"));
        let bare = format!("{:?}", Config::new("rediss://token@host"));
        assert!(!bare.contains("token"), "{bare}");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
        // An `@` the parse did not read as user info: only the scheme is shown.
        assert_eq!(redact_url("redis://h/?x=a@b"), "redis://***@b");
    }

    #[test]
    fn debug_never_shows_sentinel_passwords() {
        let c = Config::sentinel(["redis://:sentinel-pw@10.0.0.1:26379"], "locks")
            .sentinel_master_auth("app", "master-pw");
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("sentinel-pw") && !shown.contains("master-pw"),
            "{shown}"
        );
        assert!(shown.contains("redis://:***@10.0.0.1:26379"), "{shown}");
        assert!(shown.contains("sentinel_service: \"locks\""), "{shown}");
        let misplaced = Config::new("redis://h/")
            .sentinel_master_auth("", "pw")
            .validate();
        assert!(misplaced
            .unwrap_err()
            .to_string()
            .contains("Config::sentinel` only"));
    }

    #[test]
    fn the_address_map_is_read_and_checked() {
        let config = Config::sentinel(["redis://127.0.0.1:26379"], "locks")
            .sentinel_address_map([("10.0.0.5:6379", "127.0.0.1:16379")])
            .sentinel_address_map([("[fe80::1]:6380", "[::1]:16380")]);
        config.validate().expect("a valid map");
        let map = config.address_map().expect("read");
        assert_eq!(
            map.get(&("10.0.0.5".to_owned(), 6379)),
            Some(&("127.0.0.1".to_owned(), 16379))
        );
        assert_eq!(
            map.get(&("fe80::1".to_owned(), 6380)),
            Some(&("::1".to_owned(), 16380))
        );
        let refused = |config: Config| config.validate().unwrap_err().to_string();
        let sentinel = || Config::sentinel(["redis://127.0.0.1:26379"], "locks");
        for bad in [
            "10.0.0.5",
            "10.0.0.5:",
            ":6379",
            "10.0.0.5:99999",
            "::1:6379",
            "h:0",
        ] {
            let reason = refused(sentinel().sentinel_address_map([(bad, "127.0.0.1:1")]));
            assert!(
                reason.contains(&format!("`{bad}` is not a `host:port`")),
                "{reason}"
            );
        }
        let twice = refused(sentinel().sentinel_address_map([("h:1", "a:1"), ("h:1", "b:1")]));
        assert!(twice.contains("maps `h:1` twice"), "{twice}");
        let elsewhere = refused(Config::new("redis://h/").sentinel_address_map([("h:1", "a:1")]));
        assert!(elsewhere.contains("`Config::sentinel` only"), "{elsewhere}");
        assert!(format!("{config:?}").contains("sentinel_address_map"));
    }
}
