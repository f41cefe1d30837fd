//! The checks of a configuration against its limits: [`Config::validate`], what connecting
//! checks first.

use std::time::Duration;

use crate::config::options::{Config, ALL_REPLICAS, MAX_REPLICAS};
use crate::config::redact::uses_tls;
use crate::error::Error;
use crate::lease::{check_ttl, MAX_TTL};
use crate::wire::keys::validate_prefix;

impl Config {
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
}

/// Why `ALL_REPLICAS` is refused elsewhere than over Sentinel.
pub(crate) const ALL_NEEDS_SENTINEL: &str = "min_replicas = ALL_REPLICAS needs Redis Sentinel (`Config::sentinel`): the sentinels say which replicas a failover could promote; elsewhere give a count";
