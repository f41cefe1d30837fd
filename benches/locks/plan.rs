//! What one run of the harness measures: durations, sizes and the scenarios picked, from the
//! `BENCH_*` environment variables.

use std::time::Duration;

/// Durations and sizes of one run of the harness.
pub(crate) struct Plan {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    pub(crate) warmup: Duration,
    pub(crate) measure: Duration,
    pub(crate) renew_held: usize,
    pub(crate) renew_ttl: Duration,
    pub(crate) renew_measure: Duration,
    pub(crate) market_secs: Duration,
    pub(crate) market_reps: usize,
    pub(crate) workers: usize,
    /// `BENCH_DELAY_US`: each direction between the contenders and Redis delayed this long.
    pub(crate) delay: Option<Duration>,
    only: Option<Vec<String>>,
}

impl Plan {
    pub(crate) fn from_env() -> Plan {
        let quick = env_flag("BENCH_QUICK");
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let measure = env_f64("BENCH_SECS").map_or(
            Duration::from_millis(if quick { 250 } else { 600 }),
            Duration::from_secs_f64,
        );
        Plan {
            quick,
            // Many short alternating runs rather than a few long ones: on a shared machine the
            // background load shifts within seconds, and short slices spread it evenly.
            reps: env_f64("BENCH_REPS").map_or(if quick { 3 } else { 15 }, |r| r as usize),
            warmup: Duration::from_millis(100),
            measure,
            renew_held: 10_000,
            renew_ttl: Duration::from_secs(3),
            renew_measure: Duration::from_secs(if quick { 3 } else { 15 }),
            market_secs: Duration::from_secs(if quick { 1 } else { 3 }),
            market_reps: if quick { 1 } else { 3 },
            workers: env_f64("BENCH_WORKERS").map_or(cpus, |w| w as usize),
            delay: env_f64("BENCH_DELAY_US")
                .filter(|us| *us > 0.0)
                .map(|us| Duration::from_secs_f64(us / 1e6)),
            only: std::env::var("BENCH_ONLY")
                .ok()
                .map(|s| s.split(',').map(|p| p.trim().to_uppercase()).collect()),
        }
    }

    pub(crate) fn runs(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }
}

pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

pub(crate) fn env_f64(name: &str) -> Option<f64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}
