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

use std::ffi::OsString;
use std::time::Duration;

use crate::config::duration::parse_duration;
use crate::config::Config;
use crate::error::Error;

/// The prefix of every environment variable [`Config::from_env`] reads.
const ENV_PREFIX: &str = "DISTLOCK_";

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

impl Config {
    /// The configuration in the `DISTLOCK_*` environment variables: where Redis is
    /// (`DISTLOCK_URL`, or `DISTLOCK_CLUSTER_NODES`, or `DISTLOCK_SENTINELS` with
    /// `DISTLOCK_SENTINEL_SERVICE`, or `DISTLOCK_REDLOCK_MASTERS`; lists comma-separated), `DISTLOCK_KEY_PREFIX`,
    /// `DISTLOCK_DEFAULT_TTL`, `DISTLOCK_CONNECT_TIMEOUT`, `DISTLOCK_RESPONSE_TIMEOUT`,
    /// `DISTLOCK_FENCE_RETENTION`, `DISTLOCK_RENEW_BATCH_SIZE`, `DISTLOCK_MAX_HOLD`,
    /// `DISTLOCK_REQUIRE_NOEVICTION`, `DISTLOCK_MIN_REPLICAS`, `DISTLOCK_REPLICA_TIMEOUT` and
    /// `DISTLOCK_SERVER_CHECK` (a duration or `off`),
    /// each the builder method of the same name (the "Configuration" table of the `distlock`
    /// crate docs lists them all); durations as `"500ms"`, `"10s"`, `"1m30s"`. Unset variables keep the defaults of
    /// [`Config::new`]; other `DISTLOCK_*` variables are ignored (a Kubernetes service named
    /// `distlock` injects some).
    ///
    /// The result is checked like every configuration ([`Config::validate`]), so a bad value
    /// fails here, at start-up, naming its variable.
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// // DISTLOCK_URL=redis://127.0.0.1:6379/ DISTLOCK_DEFAULT_TTL=10s ./my-service
    /// distlock::Config::from_env()?.install().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when no variable (or more than one) says where Redis is, a
    /// variable does not parse (or is not Unicode), or a value is out of its limits.
    pub fn from_env() -> Result<Config, Error> {
        from_vars(std::env::vars_os())
    }
}

/// [`Config::from_env`] over the given variables.
fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Result<Config, Error> {
    let mut settings = Settings::default();
    for (name, value) in vars {
        let Some(setting) = name.to_str().and_then(|n| n.strip_prefix(ENV_PREFIX)) else {
            continue;
        };
        let var = || format!("{ENV_PREFIX}{setting}");
        let text = || {
            value
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| invalid(format!("{} is not valid Unicode", var())))
        };
        let duration = || {
            let text = text()?;
            parse_duration(text.trim())
                .map(|d| Some(Human(d)))
                .map_err(|e| invalid(format!("{}=`{text}`: {e}", var())))
        };
        let list = || Ok::<_, Error>(Some(split_list(&text()?)));
        let count = |what: &str| {
            let text = text()?;
            text.trim()
                .parse()
                .map(Some)
                .map_err(|_| invalid(format!("{}=`{text}`: expected {what}", var())))
        };
        match setting {
            "URL" => settings.url = Some(text()?),
            "CLUSTER_NODES" => settings.cluster_nodes = list()?,
            "SENTINELS" => settings.sentinels = list()?,
            "SENTINEL_SERVICE" => settings.sentinel_service = Some(text()?),
            "SENTINEL_MASTER_USERNAME" => settings.sentinel_master_username = Some(text()?),
            "SENTINEL_MASTER_PASSWORD" => settings.sentinel_master_password = Some(text()?),
            "SENTINEL_ADDRESS_MAP" => {
                let text = text()?;
                let mut map = std::collections::BTreeMap::new();
                for pair in split_list(&text) {
                    let (from, to) = pair.split_once('=').ok_or_else(|| {
                        invalid(format!("{}: `{pair}` is not `host:port=host:port`", var()))
                    })?;
                    if map
                        .insert(from.trim().to_owned(), to.trim().to_owned())
                        .is_some()
                    {
                        return Err(invalid(format!(
                            "{}: `{}` is mapped twice",
                            var(),
                            from.trim()
                        )));
                    }
                }
                settings.sentinel_address_map = Some(map);
            }
            "REDLOCK_MASTERS" => settings.redlock_masters = list()?,
            "MIN_REPLICAS" => settings.min_replicas = count("a number of replicas")?,
            "REPLICA_TIMEOUT" => settings.replica_timeout = duration()?,
            "SERVER_CHECK" => {
                let text = text()?;
                let every =
                    Every::parse(&text).map_err(|e| invalid(format!("{}=`{text}`: {e}", var())))?;
                settings.server_check = Some(every);
            }
            "KEY_PREFIX" => settings.key_prefix = Some(text()?),
            "DEFAULT_TTL" => settings.default_ttl = duration()?,
            "CONNECT_TIMEOUT" => settings.connect_timeout = duration()?,
            "RESPONSE_TIMEOUT" => settings.response_timeout = duration()?,
            "FENCE_RETENTION" => settings.fence_retention = duration()?,
            "MAX_HOLD" => settings.max_hold = duration()?,
            "RENEW_BATCH_SIZE" => settings.renew_batch_size = count("a positive integer")?,
            "REQUIRE_NOEVICTION" => {
                let text = text()?;
                let flag = parse_flag(&text).ok_or_else(|| {
                    invalid(format!("{}=`{text}`: expected `true` or `false`", var()))
                })?;
                settings.require_noeviction = Some(flag);
            }
            _ => {}
        }
    }
    settings.build(|setting| format!("{ENV_PREFIX}{}", setting.to_ascii_uppercase()))
}

/// A comma-separated list, each item trimmed, empty items dropped.
fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`, in any case.
fn parse_flag(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// `Config` as a `serde` value: the settings [`Config::from_env`] reads, under their builder
/// names (the "Configuration" table of the `distlock` crate docs lists them).
///
/// ```
/// # use distlock_core as distlock;
/// # #[cfg(feature = "serde")] {
/// #[derive(serde::Deserialize)]
/// struct AppConfig {
///     locks: distlock::Config,
/// }
/// # }
/// ```
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Settings::deserialize(deserializer)?
            .build(|setting| format!("the field `{setting}`"))
            .map_err(serde::de::Error::custom)
    }
}

/// A duration in a configuration file: text such as `"10s"`, read by [`parse_duration`].
/// A setting written as text, read by `parse` (its error message follows the text).
#[cfg(feature = "serde")]
struct Text<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
}

#[cfg(feature = "serde")]
impl<T> serde::de::Visitor<'_> for Text<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
        (self.parse)(text).map_err(|e| E::custom(format!("`{text}`: {e}")))
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Human {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(Text {
            expecting: "a duration with its unit, such as \"500ms\", \"10s\" or \"1m30s\"",
            parse: |text| {
                parse_duration(text.trim())
                    .map(Human)
                    .map_err(|e| e.to_string())
            },
        })
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Every {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(Text {
            expecting: "a duration with its unit, such as \"250ms\", or \"off\"",
            parse: Every::parse,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<Config, Error> {
        from_vars(
            vars.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
    }

    fn reason(result: Result<Config, Error>) -> String {
        match result {
            Err(Error::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn the_server_check_is_a_period_or_off() {
        let url = ("DISTLOCK_URL", "redis://127.0.0.1:6379/");
        let default = env(&[url]).unwrap();
        assert_eq!(default.server_check, Some(Duration::from_millis(250)));
        let every = env(&[url, ("DISTLOCK_SERVER_CHECK", "100ms")]).unwrap();
        assert_eq!(every.server_check, Some(Duration::from_millis(100)));
        let off = env(&[url, ("DISTLOCK_SERVER_CHECK", "off")]).unwrap();
        assert_eq!(off.server_check, None);
        let short = reason(env(&[url, ("DISTLOCK_SERVER_CHECK", "5ms")]));
        assert!(short.contains("at least 10 ms"), "{short}");
        let bad = reason(env(&[url, ("DISTLOCK_SERVER_CHECK", "often")]));
        assert!(
            bad.contains("DISTLOCK_SERVER_CHECK=`often`") && bad.contains("`off`"),
            "{bad}"
        );
    }

    #[test]
    fn every_variable_sets_its_builder_method() {
        let config = env(&[
            ("DISTLOCK_URL", "redis://:pw@127.0.0.1:6380/1"),
            ("DISTLOCK_KEY_PREFIX", "payments-lock"),
            ("DISTLOCK_DEFAULT_TTL", "10s"),
            ("DISTLOCK_CONNECT_TIMEOUT", "1.5s"),
            ("DISTLOCK_RESPONSE_TIMEOUT", "500ms"),
            ("DISTLOCK_FENCE_RETENTION", "1h"),
            ("DISTLOCK_RENEW_BATCH_SIZE", "64"),
            ("DISTLOCK_MAX_HOLD", "1m30s"),
            ("DISTLOCK_REQUIRE_NOEVICTION", "yes"),
            ("PATH", "/usr/bin"),
            ("DISTLOCK_SERVICE_HOST", "10.0.0.1"),
        ])
        .unwrap();
        assert_eq!(config.url, "redis://:pw@127.0.0.1:6380/1");
        assert_eq!(config.key_prefix, "payments-lock");
        assert_eq!(config.default_ttl, Duration::from_secs(10));
        assert_eq!(config.connect_timeout, Duration::from_millis(1500));
        assert_eq!(config.response_timeout, Duration::from_millis(500));
        assert_eq!(config.fence_retention, Duration::from_secs(3600));
        assert_eq!(config.renew_batch, 64);
        assert_eq!(config.max_hold, Some(Duration::from_secs(90)));
        assert!(config.require_noeviction);
    }

    #[test]
    fn deployments_and_replica_acknowledgement() {
        let cluster = env(&[
            (
                "DISTLOCK_CLUSTER_NODES",
                "redis://10.0.0.1:7000, redis://10.0.0.2:7000,",
            ),
            ("DISTLOCK_MIN_REPLICAS", "1"),
            ("DISTLOCK_REPLICA_TIMEOUT", "200ms"),
        ])
        .unwrap();
        let built = Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
            .min_replicas(1)
            .replica_timeout(Duration::from_millis(200));
        assert_eq!(format!("{cluster:?}"), format!("{built:?}"));

        let sentinel = env(&[
            (
                "DISTLOCK_SENTINELS",
                "redis://10.0.0.1:26379,redis://10.0.0.2:26379",
            ),
            ("DISTLOCK_SENTINEL_SERVICE", "locks"),
            ("DISTLOCK_SENTINEL_MASTER_PASSWORD", "hunter2"),
        ])
        .unwrap();
        assert_eq!(
            sentinel.sentinels,
            ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"]
        );
        assert_eq!(sentinel.sentinel_service, "locks");
        assert_eq!(
            sentinel.sentinel_master_auth,
            Some((String::new(), "hunter2".to_owned()))
        );
        assert!(!format!("{sentinel:?}").contains("hunter2"));
        let with_user = env(&[
            ("DISTLOCK_SENTINELS", "redis://10.0.0.1:26379"),
            ("DISTLOCK_SENTINEL_SERVICE", "locks"),
            ("DISTLOCK_SENTINEL_MASTER_USERNAME", "app"),
            ("DISTLOCK_SENTINEL_MASTER_PASSWORD", "pw"),
        ])
        .unwrap();
        assert_eq!(
            with_user.sentinel_master_auth,
            Some(("app".to_owned(), "pw".to_owned()))
        );
    }

    #[test]
    fn a_sentinel_address_map() {
        let sentinels = ("DISTLOCK_SENTINELS", "redis://10.0.0.1:26379");
        let service = ("DISTLOCK_SENTINEL_SERVICE", "locks");
        let mapped = env(&[
            sentinels,
            service,
            (
                "DISTLOCK_SENTINEL_ADDRESS_MAP",
                "10.0.0.5:6379=127.0.0.1:16379, 10.0.0.6:6379 = 127.0.0.1:16380",
            ),
        ])
        .unwrap();
        assert_eq!(
            mapped.sentinel_address_map,
            [
                ("10.0.0.5:6379".to_owned(), "127.0.0.1:16379".to_owned()),
                ("10.0.0.6:6379".to_owned(), "127.0.0.1:16380".to_owned())
            ]
        );
        let not_a_pair = reason(env(&[
            sentinels,
            service,
            ("DISTLOCK_SENTINEL_ADDRESS_MAP", "10.0.0.5:6379"),
        ]));
        assert!(
            not_a_pair.contains("is not `host:port=host:port`"),
            "{not_a_pair}"
        );
        let twice = reason(env(&[
            sentinels,
            service,
            ("DISTLOCK_SENTINEL_ADDRESS_MAP", "h:1=a:1,h:1=b:1"),
        ]));
        assert!(twice.contains("`h:1` is mapped twice"), "{twice}");
        let bad = reason(env(&[
            sentinels,
            service,
            ("DISTLOCK_SENTINEL_ADDRESS_MAP", "h:1=nowhere"),
        ]));
        assert!(bad.contains("`nowhere` is not a `host:port`"), "{bad}");
        let elsewhere = reason(env(&[
            ("DISTLOCK_URL", "redis://127.0.0.1/"),
            ("DISTLOCK_SENTINEL_ADDRESS_MAP", "h:1=a:1"),
        ]));
        assert!(
            elsewhere
                .contains("DISTLOCK_SENTINEL_ADDRESS_MAP is set, but DISTLOCK_SENTINELS is not"),
            "{elsewhere}"
        );
    }

    #[test]
    fn one_place_for_redis() {
        let url = ("DISTLOCK_URL", "redis://127.0.0.1/");
        let nodes = ("DISTLOCK_CLUSTER_NODES", "redis://127.0.0.1:7000");
        let sentinels = ("DISTLOCK_SENTINELS", "redis://127.0.0.1:26379");
        let service = ("DISTLOCK_SENTINEL_SERVICE", "locks");
        let message = reason(env(&[url, nodes]));
        assert!(message.contains("only one of DISTLOCK_URL"), "{message}");
        let message = reason(env(&[nodes, sentinels, service]));
        assert!(message.contains("only one of"), "{message}");
        let message = reason(env(&[sentinels]));
        assert!(
            message.starts_with("DISTLOCK_SENTINEL_SERVICE is missing"),
            "{message}"
        );
        let message = reason(env(&[url, service]));
        assert!(
            message.contains("DISTLOCK_SENTINEL_SERVICE is set, but DISTLOCK_SENTINELS is not"),
            "{message}"
        );
        let message = reason(env(&[
            sentinels,
            service,
            ("DISTLOCK_SENTINEL_MASTER_USERNAME", "app"),
        ]));
        assert!(message.contains("DISTLOCK_SENTINEL_MASTER_PASSWORD is not"));
        let message = reason(env(&[("DISTLOCK_SENTINELS", " , "), service]));
        assert!(message.contains("at least one sentinel"), "{message}");
        let message = reason(env(&[url, ("DISTLOCK_MIN_REPLICAS", "one")]));
        assert!(
            message.contains("expected a number of replicas"),
            "{message}"
        );
        let message = reason(env(&[url, ("DISTLOCK_MIN_REPLICAS", "5000")]));
        assert!(
            message.contains("min_replicas must be at most"),
            "{message}"
        );
        let message = reason(env(&[url, ("DISTLOCK_REPLICA_TIMEOUT", "0s")]));
        assert!(
            message.starts_with("DISTLOCK_REPLICA_TIMEOUT=`0s`"),
            "{message}"
        );
    }

    #[test]
    fn a_redlock_quorum() {
        let masters = [
            "redis://:pw-a@10.0.0.1:6379/",
            "redis://10.0.0.2:6379/",
            "redis://:pw-c@10.0.0.3:6380/",
        ];
        let config = env(&[
            (
                "DISTLOCK_REDLOCK_MASTERS",
                &format!(" {}, {} ,{},", masters[0], masters[1], masters[2]),
            ),
            ("DISTLOCK_RESPONSE_TIMEOUT", "300ms"),
        ])
        .unwrap();
        assert_eq!(config.redlock_masters, masters);
        let built = Config::redlock(masters).response_timeout(Duration::from_millis(300));
        let shown = format!("{config:?}");
        assert_eq!(shown, format!("{built:?}"));
        assert!(
            !shown.contains("pw-a") && !shown.contains("pw-c"),
            "{shown}"
        );
        assert!(shown.contains("redis://:***@10.0.0.1:6379/"), "{shown}");
    }

    #[test]
    fn a_redlock_quorum_is_refused_next_to_another_deployment() {
        let masters = (
            "DISTLOCK_REDLOCK_MASTERS",
            "redis://:pw-a@10.0.0.1/,redis://:pw-b@10.0.0.2/",
        );
        for (other, value) in [
            ("DISTLOCK_CLUSTER_NODES", "redis://:pw-n@10.0.0.9:7000"),
            ("DISTLOCK_SENTINELS", "redis://:pw-n@10.0.0.9:26379"),
            ("DISTLOCK_URL", "redis://:pw-n@10.0.0.9/"),
        ] {
            let message = reason(env(&[masters, (other, value)]));
            assert!(
                message.starts_with(&format!(
                    "DISTLOCK_REDLOCK_MASTERS is set together with {other}: a RedLock quorum"
                )),
                "{message}"
            );
            assert!(!message.contains("pw-"), "{message}");
        }
        let message = reason(env(&[masters, ("DISTLOCK_MIN_REPLICAS", "1")]));
        assert!(
            message.starts_with(
                "DISTLOCK_MIN_REPLICAS is set, but it does not apply to DISTLOCK_REDLOCK_MASTERS"
            ),
            "{message}"
        );
        assert!(env(&[masters, ("DISTLOCK_MIN_REPLICAS", "0")]).is_ok());
        let message = reason(env(&[("DISTLOCK_REDLOCK_MASTERS", " , ")]));
        assert!(message.contains("at least one master"), "{message}");
        let message = reason(env(&[(
            "DISTLOCK_REDLOCK_MASTERS",
            "redis://10.0.0.1/,redis://10.0.0.1/",
        )]));
        assert!(message.contains("the same master twice"), "{message}");
    }

    #[test]
    fn unset_variables_keep_the_defaults() {
        let config = env(&[("DISTLOCK_URL", "redis://127.0.0.1/")]).unwrap();
        let defaults = Config::new("redis://127.0.0.1/");
        assert_eq!(format!("{config:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn bad_values_name_their_variable() {
        let message = reason(env(&[]));
        assert!(
            message.contains("DISTLOCK_URL is missing: the Redis URL is required (or DISTLOCK_CLUSTER_NODES, or DISTLOCK_SENTINELS with DISTLOCK_SENTINEL_SERVICE, or DISTLOCK_REDLOCK_MASTERS)"),
            "{message}"
        );
        let url = ("DISTLOCK_URL", "redis://127.0.0.1/");
        let message = reason(env(&[url, ("DISTLOCK_DEFAULT_TTL", "10")]));
        assert!(
            message.starts_with("DISTLOCK_DEFAULT_TTL=`10`: not a duration"),
            "{message}"
        );
        let message = reason(env(&[url, ("DISTLOCK_RESPONSE_TIMEOUT", "250us")]));
        assert!(message.contains("millisecond"), "{message}");
        let message = reason(env(&[url, ("DISTLOCK_RENEW_BATCH_SIZE", "-1")]));
        assert!(message.contains("positive integer"), "{message}");
        let message = reason(env(&[url, ("DISTLOCK_REQUIRE_NOEVICTION", "maybe")]));
        assert!(message.contains("`true` or `false`"), "{message}");
    }

    #[test]
    fn values_are_validated_like_the_builder() {
        let url = ("DISTLOCK_URL", "redis://127.0.0.1/");
        for (var, value, builder) in [
            (
                "DISTLOCK_KEY_PREFIX",
                "a{b}",
                Config::new(url.1).key_prefix("a{b}"),
            ),
            (
                "DISTLOCK_DEFAULT_TTL",
                "50ms",
                Config::new(url.1).default_ttl(Duration::from_millis(50)),
            ),
            (
                "DISTLOCK_DEFAULT_TTL",
                "31d",
                Config::new(url.1).default_ttl(Duration::from_secs(31 * 86_400)),
            ),
            (
                "DISTLOCK_FENCE_RETENTION",
                "31d",
                Config::new(url.1).fence_retention(Duration::from_secs(31 * 86_400)),
            ),
            (
                "DISTLOCK_RENEW_BATCH_SIZE",
                "0",
                Config::new(url.1).renew_batch_size(0),
            ),
        ] {
            let from_env = env(&[url, (var, value)]).unwrap_err().to_string();
            let from_builder = builder.validate().unwrap_err().to_string();
            assert_eq!(from_env, from_builder, "{var}={value}");
        }
    }

    #[test]
    fn flags() {
        for (text, flag) in [
            ("TRUE", true),
            ("1", true),
            ("on", true),
            ("No", false),
            ("0", false),
        ] {
            assert_eq!(parse_flag(text), Some(flag), "{text}");
        }
        assert_eq!(parse_flag("2"), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_variable_that_is_not_unicode_is_an_error() {
        use std::os::unix::ffi::OsStringExt;
        let vars = [
            (OsString::from("DISTLOCK_URL"), OsString::from("redis://h/")),
            (
                OsString::from("DISTLOCK_KEY_PREFIX"),
                OsString::from_vec(vec![0xff, 0xfe]),
            ),
        ];
        assert!(reason(from_vars(vars)).contains("DISTLOCK_KEY_PREFIX is not valid Unicode"));
    }
}
