//! Durations written by people (`"10s"`, `"1m30s"`, `"1.5s"`), read the same way wherever
//! distlock accepts one as text.
//!
//! The grammar is the [`humantime`] crate's: numbers with units, optionally separated by
//! spaces, summed (`"1h 30m"`, `"1m30s"`), with decimal fractions (`"1.5s"`). On top of it,
//! distlock refuses what cannot mean anything for a lock: zero, and anything finer than a
//! millisecond (`"250us"`, `"1.0005s"`), since Redis expires keys with millisecond resolution
//! (`PX`) and a lease rounded silently would not be the lease that was written.
//!
//! The `#[distributed_lock]` attribute applies exactly these rules to its `ttl`, `wait` and
//! `min_hold` literals at compile time (the macro crate cannot link this one, so it calls
//! `humantime` itself; its tests check that both agree on a table of inputs).

use std::fmt;
use std::time::Duration;

/// Parses a human-readable duration such as `"500ms"`, `"10s"`, `"1m30s"`, `"1m 30s"`,
/// `"1.5s"` or `"2h"`.
///
/// Units: `ms`, `s`, `m` (minutes), `h`, `d`, `w`, with the long forms `humantime` accepts
/// (`sec`, `min`, `hours`, ...); `us` and `ns` only for whole milliseconds (`"1000us"`).
///
/// # Errors
///
/// [`DurationError`] when the text is not a duration, is zero, is not a whole number of
/// milliseconds, or does not fit in `u64` milliseconds.
///
/// ```
/// # use distlock_core as distlock;
/// use std::time::Duration;
/// use distlock::{parse_duration, DurationError};
///
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("250us"), Err(DurationError::SubMillisecond));
/// assert_eq!(parse_duration("0s"), Err(DurationError::Zero));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let duration = humantime::parse_duration(text).map_err(|error| DurationError::Malformed {
        reason: error.to_string(),
    })?;
    if duration.is_zero() {
        return Err(DurationError::Zero);
    }
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(DurationError::SubMillisecond);
    }
    if u64::try_from(duration.as_millis()).is_err() {
        return Err(DurationError::TooLarge);
    }
    Ok(duration)
}

/// Why [`parse_duration`] refused a text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// Not a duration (`"10"`, `"ten seconds"`, `"10 parsecs"`).
    Malformed {
        /// What the parser found wrong.
        reason: String,
    },
    /// The duration is zero.
    Zero,
    /// Not a whole number of milliseconds (`"250us"`).
    SubMillisecond,
    /// More than `u64::MAX` milliseconds.
    TooLarge,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Malformed { reason } => write!(
                f,
                "not a duration ({reason}): write numbers with units, e.g. \"500ms\", \"10s\", \"1m30s\", \"1.5h\""
            ),
            DurationError::Zero => f.write_str("the duration is zero"),
            DurationError::SubMillisecond => f.write_str(
                "the duration is not a whole number of milliseconds: locks have millisecond resolution (e.g. \"1ms\", not \"250us\")",
            ),
            DurationError::TooLarge => f.write_str("the duration does not fit in u64 milliseconds"),
        }
    }
}

impl std::error::Error for DurationError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Result<Duration, DurationError> {
        Ok(Duration::from_millis(millis))
    }

    #[test]
    fn what_config_files_say() {
        assert_eq!(parse_duration("500ms"), ms(500));
        assert_eq!(parse_duration("10s"), ms(10_000));
        assert_eq!(parse_duration("5m"), ms(300_000));
        assert_eq!(parse_duration("1h"), ms(3_600_000));
        assert_eq!(parse_duration("1m30s"), ms(90_000));
        assert_eq!(parse_duration("1m 30s"), ms(90_000));
        assert_eq!(parse_duration("1.5s"), ms(1_500));
        assert_eq!(parse_duration("0.25s"), ms(250));
        assert_eq!(parse_duration("2 min"), ms(120_000));
        assert_eq!(parse_duration("1000us"), ms(1));
        assert_eq!(parse_duration("1d"), ms(86_400_000));
    }

    #[test]
    fn refusals() {
        assert_eq!(parse_duration("0s"), Err(DurationError::Zero));
        assert_eq!(parse_duration("0"), Err(DurationError::Zero));
        assert_eq!(parse_duration("250us"), Err(DurationError::SubMillisecond));
        assert_eq!(
            parse_duration("1.0005s"),
            Err(DurationError::SubMillisecond)
        );
        assert_eq!(
            parse_duration("100000000000y"),
            Err(DurationError::TooLarge)
        );
        for text in ["", "10", "s", "-1s", "10 parsecs", "1_000ms", "ten seconds"] {
            assert!(
                matches!(parse_duration(text), Err(DurationError::Malformed { .. })),
                "{text:?}"
            );
        }
    }

    #[test]
    fn messages() {
        let message = parse_duration("250us").unwrap_err().to_string();
        assert!(message.contains("millisecond resolution"), "{message}");
        let message = parse_duration("10").unwrap_err().to_string();
        assert!(
            message.starts_with("not a duration (time unit needed"),
            "{message}"
        );
    }
}
