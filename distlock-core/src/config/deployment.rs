//! Which deployment a configuration reaches: one server ([`Config::new`]), a Redis Cluster, a
//! RedLock quorum or a master behind Redis Sentinel (with its credentials and its address
//! map), and how that deployment is named in errors.

use std::collections::HashMap;

use crate::config::options::Config;
use crate::config::redact::redact_url;
use crate::error::Error;

impl Config {
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
        let (cluster_nodes, config) = Config::of_first(nodes);
        Config {
            cluster_nodes,
            ..config
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
        let (redlock_masters, config) = Config::of_first(masters);
        Config {
            redlock_masters,
            ..config
        }
    }

    /// The URLs `urls` and a configuration of the first (the one a deployment of several
    /// servers is named and shown by; empty when there is none, which `validate` refuses).
    fn of_first<I, S>(urls: I) -> (Vec<String>, Config)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        let config = Config::new(urls.first().cloned().unwrap_or_default());
        (urls, config)
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
