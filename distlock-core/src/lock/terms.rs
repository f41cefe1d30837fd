//! The resolved terms of one acquisition: what the builder's options come to once checked
//! against the client's configuration.

use std::time::Duration;

use crate::metrics::Labels;

/// The resolved terms of one acquisition.
pub(crate) struct Terms {
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) wait: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) fenced: bool,
    /// Replicas that must acknowledge the acquire and each renewal (0: none).
    pub(crate) min_replicas: usize,
    /// The `lock` and `kind` labels of the metrics.
    pub(crate) label: Labels,
}
