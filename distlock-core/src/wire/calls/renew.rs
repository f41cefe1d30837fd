//! The renewal of a batch of leases (`RENEW`), of every kind of hold alike: locks, permits,
//! read holds, a set's locks (the watchdog's batches, the re-entry check).

use std::sync::Arc;
use std::time::Duration;

use crate::lease::millis_ceil;
use crate::wire::request::{Call, ReplicaWait, Request, RENEW_SCRIPT};

/// One lease in a [`RenewCall`].
#[derive(Debug, Clone)]
pub(crate) struct RenewItem {
    pub(crate) key: Arc<str>,
    /// `d2:<owner>`.
    pub(crate) value: Arc<str>,
    pub(crate) ttl: Duration,
    /// A permit's semaphore count (0: a lock or a read hold): over a RedLock quorum a permit's
    /// renewal counts only when as many masters renewed it as its acquire needed
    /// (`count::permit_quorum`), a lock's by majority. Not sent.
    pub(crate) permits: u32,
}

/// [`RENEW`] of a batch of leases.
pub(crate) struct RenewCall<'a> {
    pub(crate) id: &'a [u8],
    pub(crate) items: &'a [RenewItem],
    /// Replicas that must acknowledge the renewal (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

/// What [`RENEW`] found for one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Still ours: the expiry reaches at least the ttl now (it was never shortened).
    Yes,
    /// The key is gone (expired, evicted, deleted).
    Gone,
    /// Another owner holds it.
    OtherOwner,
    /// The key is no lock of this protocol any more (overwritten).
    NotALock,
    /// RedLock, in a renewal batch: the masters that answered neither renewed it by majority
    /// nor put it out of a majority's reach, and those that did not answer could tip it (see
    /// `count`). A failed renewal of this lock alone; never a reply of one master.
    Undecided,
}

impl Call for RenewCall<'_> {
    type Raw = Vec<i64>;
    type Reply = Vec<Renewed>;

    fn request(&self) -> Request {
        let mut cmd = RENEW_SCRIPT.evalsha();
        cmd.arg(self.items.len());
        for item in self.items {
            cmd.arg(&*item.key);
        }
        cmd.arg(self.id);
        for item in self.items {
            cmd.arg(millis_ceil(item.ttl)).arg(&*item.value);
        }
        Request::Script(&RENEW_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, statuses: Vec<i64>) -> Option<Vec<Renewed>> {
        if statuses.len() != self.items.len() {
            return None;
        }
        statuses
            .into_iter()
            .map(|status| match status {
                1 => Some(Renewed::Yes),
                0 => Some(Renewed::Gone),
                -1 => Some(Renewed::OtherOwner),
                -2 => Some(Renewed::NotALock),
                _ => None,
            })
            .collect()
    }
}
