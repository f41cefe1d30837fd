//! The RedLock waiters' queue, the client's side: a waiting acquire's ticket (its place in the
//! queue every master keeps for the lock, see `scripts::ACQUIRE_QUEUED`) and the entry it takes
//! out again when it leaves without the lock.
//!
//! Over a RedLock quorum a release wakes the waiters of every client at once. Each master
//! grants a free lock only to the caller with the lowest ticket it has queued, and the ticket
//! is the same on every master (the caller's clock when its acquire started), so the masters
//! agree on whose turn it is: the waiters no longer split them, and a client that releases
//! and asks again at once queues behind the waiters instead of taking the lock back before
//! their wake-ups arrive. Tickets from hosts whose clocks disagree are ordered by those clocks
//! (a host ahead by a second queues behind waiters that came up to a second later).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Operation;
use crate::lock::guard::Hold;
use crate::wire::calls::LeaveQueueCall;

/// A waiting acquire's ticket: now, in µs since the Unix epoch (never 0, which means "does not
/// wait").
pub(crate) fn ticket() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// A waiting acquire's entry in the masters' queues, made before its first queuing attempt:
/// dropping it (the acquire gave up, failed, was cancelled or took the lock) takes the entry out
/// on every master in the background. Without it a waiter that went away would hold the
/// waiters behind it up for the grace, and so would one that took the lock: taking removes the
/// entry where the lock was granted, but a master that refused it (its old holder's release had
/// not arrived yet) would keep it ahead of everyone until it lapsed (with 2 of 5 masters down,
/// that master's refusal stalls every handoff). An acquire that takes the lock at its first
/// attempt never queued.
pub(crate) struct QueueEntry {
    hold: Hold,
}

impl QueueEntry {
    /// The entry of `hold`'s acquisition (its lock value).
    pub(crate) fn new(hold: Hold) -> Self {
        QueueEntry { hold }
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        let hold = self.hold.clone();
        let client = hold.client.clone();
        client.spawn_cleanup(async move {
            let id = hold.client.new_request_id();
            let call = LeaveQueueCall {
                keys: &hold.keys,
                value: hold.value.as_bytes(),
                id: id.as_bytes(),
            };
            let name = hold.keys.name();
            if let Err(error) = hold.client.call(Operation::Acquire, name, &call).await {
                tracing::debug!(key = %name, %error, "leaving the RedLock queue failed; the entry lapses by itself");
            }
        });
    }
}
