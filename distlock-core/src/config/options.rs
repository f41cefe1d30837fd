//! The configuration itself: [`Config`], its defaults ([`Config::new`]) and the options of the
//! locks taken through it (key prefix, timeouts, renewal, replicas, server checks, TLS).

use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;

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
    /// Independent masters of a RedLock quorum (empty: not one; see `deploy::redlock`).
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
    ///
    /// One server: a Redis Cluster node at `url` fails [`Config::connect`] with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming [`Config::cluster`] (a node
    /// answers only for its own hash slots).
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
}

/// The most replicas a lock may ask to acknowledge it (a typo guard; no deployment has more).
pub(crate) const MAX_REPLICAS: usize = 1000;

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
