//! How a set's calls count over a RedLock quorum: its acquire as one lock's (each master
//! grants all of the set or none), its release by a majority that released every lock of it.

use std::time::Duration;

use crate::wire::calls::{Acquired, Released, SetAcquireCall, SetAcquired, SetReleaseCall};

use super::{acquired, released, NoQuorum, Quorate};

/// A set's acquire (`lock::kind::set`): each master grants all of the set or none, so the set is
/// taken when a majority granted it (within the validity time), as one lock is; busy at the
/// first lock a master found held. Fenced sets are refused over RedLock before any request.
impl Quorate for SetAcquireCall<'_> {
    fn ordered_by(&self) -> Option<&[u8]> {
        Some(self.value)
    }

    fn count(
        &self,
        replies: &[SetAcquired],
        nodes: usize,
        silent: usize,
        elapsed: Duration,
    ) -> Result<SetAcquired, NoQuorum> {
        let found: Vec<Acquired> = replies.iter().map(|r| r.found).collect();
        let found = acquired(&found, nodes, silent, self.ttl, elapsed)?;
        let at = replies
            .iter()
            .find(|r| !matches!(r.found, Acquired::Taken { .. }))
            .map_or(0, |r| r.at);
        Ok(SetAcquired {
            found,
            at,
            tokens: Vec::new(),
        })
    }

    fn gives_up_on_down(&self) -> bool {
        true
    }
}

quorate_release!(SetReleaseCall);
