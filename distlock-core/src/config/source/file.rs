//! `Config` read from a configuration file (feature `serde`): the same settings as the
//! environment, under their builder names.

use super::{Every, Human, Settings};
use crate::config::duration::parse_duration;
use crate::config::options::Config;

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
