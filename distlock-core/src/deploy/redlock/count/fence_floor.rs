//! How a fence floor's read or raise counts over a RedLock quorum: once a majority answered,
//! the largest of their floors.

use std::time::Duration;

use crate::wire::calls::FenceFloorCall;

use super::{answered, NoQuorum, Quorate};

impl Quorate for FenceFloorCall<'_> {
    /// The largest floor among a majority's (fewer answers: no quorum).
    fn count(
        &self,
        replies: &[u64],
        nodes: usize,
        _silent: usize,
        _elapsed: Duration,
    ) -> Result<u64, NoQuorum> {
        answered(replies, nodes).map(|r| r.iter().copied().max().unwrap_or(0))
    }
}
