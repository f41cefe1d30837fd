//! Configuration from outside the code: environment variables ([`Config::from_env`]) and, with
//! the `serde` feature, configuration files (`Config` implements `serde::Deserialize`), both
//! checked by [`Config::validate`], exactly as a configuration built in code is at connect.
//!
//! Both read the same settings, named after the builder methods; in the environment they are
//! upper case behind `DISTLOCK_`:
//!
//! | setting | variable | value |
//! | --- | --- | --- |
//! | `url` (required) | `DISTLOCK_URL` | `redis://[:password@]host[:port][/db]` |
//! | `key_prefix` | `DISTLOCK_KEY_PREFIX` | 1–128 bytes without `{` or `}` (default `distlock`) |
//! | `default_ttl` | `DISTLOCK_DEFAULT_TTL` | a duration (default `30s`) |
//! | `connect_timeout` | `DISTLOCK_CONNECT_TIMEOUT` | a duration (default `5s`) |
//! | `response_timeout` | `DISTLOCK_RESPONSE_TIMEOUT` | a duration (default `2s`) |
//! | `fence_retention` | `DISTLOCK_FENCE_RETENTION` | a duration (default `10m`) |
//! | `renew_batch_size` | `DISTLOCK_RENEW_BATCH_SIZE` | a positive integer (default `256`) |
//! | `max_hold` | `DISTLOCK_MAX_HOLD` | a duration (default: no cap) |
//! | `require_noeviction` | `DISTLOCK_REQUIRE_NOEVICTION` | `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`) |
//!
//! Durations are written as people write them (`"500ms"`, `"10s"`, `"1m30s"`) and read by
//! [`crate::parse_duration`], the grammar of the attribute's literals.

use std::ffi::OsString;
use std::time::Duration;

use crate::config::Config;
use crate::duration::parse_duration;
use crate::error::Error;

/// The prefix of every environment variable [`Config::from_env`] reads.
const ENV_PREFIX: &str = "DISTLOCK_";

/// A duration a configuration source gave, read by [`parse_duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Human(Duration);

/// Every setting a configuration source may give; `None` keeps the builder's default.
#[derive(Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
struct Settings {
    url: Option<String>,
    key_prefix: Option<String>,
    default_ttl: Option<Human>,
    connect_timeout: Option<Human>,
    response_timeout: Option<Human>,
    fence_retention: Option<Human>,
    renew_batch_size: Option<usize>,
    max_hold: Option<Human>,
    require_noeviction: Option<bool>,
}

impl Settings {
    /// The configuration these settings describe, through the builder and its validation.
    /// `missing_url` says how the source spells the missing URL.
    fn build(self, missing_url: &str) -> Result<Config, Error> {
        let Some(url) = self.url else {
            return Err(invalid(format!(
                "{missing_url} is missing: the Redis URL is required"
            )));
        };
        let mut config = Config::new(url);
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
        config.validate()?;
        Ok(config)
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidConfig { reason }
}

impl Config {
    /// The configuration in the `DISTLOCK_*` environment variables: `DISTLOCK_URL` (required),
    /// `DISTLOCK_KEY_PREFIX`, `DISTLOCK_DEFAULT_TTL`, `DISTLOCK_CONNECT_TIMEOUT`,
    /// `DISTLOCK_RESPONSE_TIMEOUT`, `DISTLOCK_FENCE_RETENTION`, `DISTLOCK_RENEW_BATCH_SIZE`,
    /// `DISTLOCK_MAX_HOLD` and `DISTLOCK_REQUIRE_NOEVICTION`, each the builder method of the
    /// same name; durations as `"500ms"`, `"10s"`, `"1m30s"`. Unset variables keep the
    /// defaults of [`Config::new`]; other `DISTLOCK_*` variables are ignored (a Kubernetes
    /// service named `distlock` injects some).
    ///
    /// The result is checked like every configuration ([`Config::validate`]), so a bad value
    /// fails here, at start-up, naming its variable.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock_core::Error> {
    /// // DISTLOCK_URL=redis://127.0.0.1:6379/ DISTLOCK_DEFAULT_TTL=10s ./my-service
    /// distlock_core::Config::from_env()?.install().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `DISTLOCK_URL` is unset, a variable does not parse (or is
    /// not Unicode), or a value is out of its limits.
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
        match setting {
            "URL" => settings.url = Some(text()?),
            "KEY_PREFIX" => settings.key_prefix = Some(text()?),
            "DEFAULT_TTL" => settings.default_ttl = duration()?,
            "CONNECT_TIMEOUT" => settings.connect_timeout = duration()?,
            "RESPONSE_TIMEOUT" => settings.response_timeout = duration()?,
            "FENCE_RETENTION" => settings.fence_retention = duration()?,
            "MAX_HOLD" => settings.max_hold = duration()?,
            "RENEW_BATCH_SIZE" => {
                let text = text()?;
                let size = text.trim().parse().map_err(|_| {
                    invalid(format!("{}=`{text}`: expected a positive integer", var()))
                })?;
                settings.renew_batch_size = Some(size);
            }
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
    settings.build("DISTLOCK_URL")
}

/// `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`, in any case.
fn parse_flag(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// `Config` as a `serde` value: the settings of the table above, under their builder names.
///
/// ```
/// # #[cfg(feature = "serde")] {
/// #[derive(serde::Deserialize)]
/// struct AppConfig {
///     locks: distlock_core::Config,
/// }
/// # }
/// ```
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Settings::deserialize(deserializer)?
            .build("the field `url`")
            .map_err(serde::de::Error::custom)
    }
}

/// A duration in a configuration file: text such as `"10s"`, read by [`parse_duration`].
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Human {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;

        impl serde::de::Visitor<'_> for Text {
            type Value = Human;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration with its unit, such as \"500ms\", \"10s\" or \"1m30s\"")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Human, E> {
                parse_duration(text.trim())
                    .map(Human)
                    .map_err(|e| E::custom(format!("`{text}`: {e}")))
            }
        }

        deserializer.deserialize_str(Text)
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
    fn unset_variables_keep_the_defaults() {
        let config = env(&[("DISTLOCK_URL", "redis://127.0.0.1/")]).unwrap();
        let defaults = Config::new("redis://127.0.0.1/");
        assert_eq!(format!("{config:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn bad_values_name_their_variable() {
        assert!(reason(env(&[])).contains("DISTLOCK_URL is missing"));
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
