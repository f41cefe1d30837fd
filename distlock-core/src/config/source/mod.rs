//! Configuration from outside the code: environment variables ([`Config::from_env`]) and, with
//! the `serde` feature, configuration files (`Config` implements `serde::Deserialize`), both
//! checked by [`Config::validate`], exactly as a configuration built in code is at connect.
//!
//! Both read the same settings, named after the builder methods; in the environment they are
//! upper case behind `DISTLOCK_`:
//!
//! | setting | variable | value |
//! | --- | --- | --- |
//! | `url` | `DISTLOCK_URL` | `redis://[:password@]host[:port][/db]`: one server ([`Config::new`]) |
//! | `cluster_nodes` | `DISTLOCK_CLUSTER_NODES` | seed node URLs of a Redis Cluster ([`Config::cluster`]): a list in a file, comma-separated in the variable |
//! | `sentinels` | `DISTLOCK_SENTINELS` | sentinel URLs ([`Config::sentinel`]): a list in a file, comma-separated in the variable |
//! | `sentinel_service` | `DISTLOCK_SENTINEL_SERVICE` | the master's name at the sentinels (required with `sentinels`) |
//! | `sentinel_master_username`, `sentinel_master_password` | `DISTLOCK_SENTINEL_MASTER_USERNAME`, `DISTLOCK_SENTINEL_MASTER_PASSWORD` | the master's credentials ([`Config::sentinel_master_auth`]; the user name defaults to the default user) |
//! | `sentinel_address_map` | `DISTLOCK_SENTINEL_ADDRESS_MAP` | where to reach the addresses the sentinels announce ([`Config::sentinel_address_map`]): a table of `"host:port" = "host:port"` in a file, `host:port=host:port` pairs comma-separated in the variable |
//! | `redlock_masters` | `DISTLOCK_REDLOCK_MASTERS` | the URLs of the independent masters of a RedLock quorum ([`Config::redlock`]; each with its own password, if any): a list in a file, comma-separated in the variable |
//! | `key_prefix` | `DISTLOCK_KEY_PREFIX` | 1–128 bytes without `{` or `}` (default `distlock`) |
//! | `default_ttl` | `DISTLOCK_DEFAULT_TTL` | a duration (default `30s`) |
//! | `connect_timeout` | `DISTLOCK_CONNECT_TIMEOUT` | a duration (default `5s`) |
//! | `response_timeout` | `DISTLOCK_RESPONSE_TIMEOUT` | a duration (default `2s`) |
//! | `fence_retention` | `DISTLOCK_FENCE_RETENTION` | a duration (default `10m`) |
//! | `renew_batch_size` | `DISTLOCK_RENEW_BATCH_SIZE` | a positive integer (default `256`) |
//! | `max_hold` | `DISTLOCK_MAX_HOLD` | a duration (default: no cap) |
//! | `require_noeviction` | `DISTLOCK_REQUIRE_NOEVICTION` | `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`) |
//! | `min_replicas` | `DISTLOCK_MIN_REPLICAS` | replicas that must acknowledge each acquire and renewal (default `0`) |
//! | `replica_timeout` | `DISTLOCK_REPLICA_TIMEOUT` | a duration (default `500ms`) |
//! | `server_check` | `DISTLOCK_SERVER_CHECK` | a duration, or `off` (default `250ms`; [`Config::server_check`]) |
//!
//! Exactly one of `url`, `cluster_nodes`, `sentinels` and `redlock_masters` says where Redis
//! is; `redlock_masters` is refused next to any of the others (a RedLock quorum is neither a
//! cluster nor a Sentinel deployment), and so is `min_replicas` above 0 with it. TLS
//! certificates ([`Config::tls_root_certificates`], [`Config::tls_client_certificate`]) are
//! set in code.
//!
//! Durations are written as people write them (`"500ms"`, `"10s"`, `"1m30s"`) and read by
//! [`crate::parse_duration`], the grammar of the attribute's literals.
//!
//! `env.rs` reads the environment, `file.rs` (feature `serde`) a configuration file; both fill
//! the [`Settings`] here and build them the same way.

use std::time::Duration;

use crate::config::duration::parse_duration;
use crate::config::options::Config;
use crate::error::Error;

mod env;
#[cfg(feature = "serde")]
mod file;
#[cfg(test)]
mod tests;

/// A duration a configuration source gave, read by [`parse_duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Human(Duration);

/// A period a configuration source gave: a duration, or `off` (never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Every(Option<Duration>);

impl Every {
    fn parse(text: &str) -> Result<Every, String> {
        match text.trim() {
            "off" => Ok(Every(None)),
            text => parse_duration(text)
                .map(|d| Every(Some(d)))
                .map_err(|e| format!("{e}, or `off`")),
        }
    }
}

/// Every setting a configuration source may give; `None` keeps the builder's default.
#[derive(Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
struct Settings {
    url: Option<String>,
    cluster_nodes: Option<Vec<String>>,
    sentinels: Option<Vec<String>>,
    sentinel_service: Option<String>,
    sentinel_master_username: Option<String>,
    sentinel_master_password: Option<String>,
    sentinel_address_map: Option<std::collections::BTreeMap<String, String>>,
    redlock_masters: Option<Vec<String>>,
    key_prefix: Option<String>,
    default_ttl: Option<Human>,
    connect_timeout: Option<Human>,
    response_timeout: Option<Human>,
    fence_retention: Option<Human>,
    renew_batch_size: Option<usize>,
    max_hold: Option<Human>,
    require_noeviction: Option<bool>,
    min_replicas: Option<usize>,
    replica_timeout: Option<Human>,
    server_check: Option<Every>,
}

impl Settings {
    /// The configuration these settings describe, through the builder and its validation.
    /// `name` spells a setting as the source does (`DISTLOCK_URL`, "the field `url`").
    fn build(self, name: fn(&str) -> String) -> Result<Config, Error> {
        let sentinel = self.sentinels.is_some();
        if self.redlock_masters.is_some() {
            let others = [
                ("url", self.url.is_some()),
                ("cluster_nodes", self.cluster_nodes.is_some()),
                ("sentinels", sentinel),
            ];
            if let Some((other, _)) = others.iter().find(|(_, given)| *given) {
                return Err(invalid(format!(
                    "{} is set together with {}: a RedLock quorum takes independent masters, not a cluster, a Sentinel deployment or another server; give only one of them",
                    name("redlock_masters"),
                    name(other)
                )));
            }
            if self.min_replicas.is_some_and(|replicas| replicas > 0) {
                return Err(invalid(format!(
                    "{} is set, but it does not apply to {} (a RedLock quorum's masters have no replicas to wait for)",
                    name("min_replicas"),
                    name("redlock_masters")
                )));
            }
        }
        let mut config = match (
            self.url,
            self.cluster_nodes,
            self.sentinels,
            self.redlock_masters,
        ) {
            (Some(url), None, None, None) => Config::new(url),
            (None, Some(nodes), None, None) => Config::cluster(nodes),
            (None, None, Some(sentinels), None) => {
                let Some(service) = self.sentinel_service.clone() else {
                    return Err(invalid(format!(
                        "{} is missing: the sentinels need the name they know the master by",
                        name("sentinel_service")
                    )));
                };
                Config::sentinel(sentinels, service)
            }
            (None, None, None, Some(masters)) => Config::redlock(masters),
            (None, None, None, None) => {
                return Err(invalid(format!(
                    "{} is missing: the Redis URL is required (or {}, or {} with {}, or {})",
                    name("url"),
                    name("cluster_nodes"),
                    name("sentinels"),
                    name("sentinel_service"),
                    name("redlock_masters")
                )))
            }
            _ => {
                return Err(invalid(format!(
                    "give only one of {}, {} and {}",
                    name("url"),
                    name("cluster_nodes"),
                    name("sentinels")
                )))
            }
        };
        let sentinel_only = [
            ("sentinel_service", self.sentinel_service.is_some()),
            (
                "sentinel_master_username",
                self.sentinel_master_username.is_some(),
            ),
            (
                "sentinel_master_password",
                self.sentinel_master_password.is_some(),
            ),
            ("sentinel_address_map", self.sentinel_address_map.is_some()),
        ];
        for (setting, given) in sentinel_only {
            if given && !sentinel {
                return Err(invalid(format!(
                    "{} is set, but {} is not: it applies to a Sentinel deployment only",
                    name(setting),
                    name("sentinels")
                )));
            }
        }
        match (self.sentinel_master_username, self.sentinel_master_password) {
            (username, Some(password)) => {
                config = config.sentinel_master_auth(username.unwrap_or_default(), password);
            }
            (Some(_), None) => {
                return Err(invalid(format!(
                    "{} is set, but {} is not",
                    name("sentinel_master_username"),
                    name("sentinel_master_password")
                )))
            }
            (None, None) => {}
        }
        if let Some(map) = self.sentinel_address_map {
            config = config.sentinel_address_map(map);
        }
        if let Some(prefix) = self.key_prefix {
            config = config.key_prefix(prefix);
        }
        if let Some(Human(ttl)) = self.default_ttl {
            config = config.default_ttl(ttl);
        }
        if let Some(Human(timeout)) = self.connect_timeout {
            config = config.connect_timeout(timeout);
        }
        if let Some(Human(timeout)) = self.response_timeout {
            config = config.response_timeout(timeout);
        }
        if let Some(Human(retention)) = self.fence_retention {
            config = config.fence_retention(retention);
        }
        if let Some(size) = self.renew_batch_size {
            config = config.renew_batch_size(size);
        }
        if let Some(Human(cap)) = self.max_hold {
            config = config.max_hold(cap);
        }
        if let Some(require) = self.require_noeviction {
            config = config.require_noeviction(require);
        }
        if let Some(replicas) = self.min_replicas {
            config = config.min_replicas(replicas);
        }
        if let Some(Human(timeout)) = self.replica_timeout {
            config = config.replica_timeout(timeout);
        }
        if let Some(Every(every)) = self.server_check {
            config = config.server_check(every);
        }
        config.validate()?;
        Ok(config)
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidConfig { reason }
}
