//! [`Config::from_env`]: the `DISTLOCK_*` environment variables.

use std::ffi::OsString;

use super::{invalid, Every, Human, Settings};
use crate::config::duration::parse_duration;
use crate::config::options::Config;
use crate::error::Error;

/// The prefix of every environment variable [`Config::from_env`] reads.
const ENV_PREFIX: &str = "DISTLOCK_";

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
pub(super) fn from_vars(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Config, Error> {
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
pub(super) fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`, in any case.
pub(super) fn parse_flag(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}
