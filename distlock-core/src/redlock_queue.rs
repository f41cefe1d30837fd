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
use crate::guard::Hold;
use crate::scripts::LeaveQueueCall;

/// A waiting acquire's ticket: now, in µs since the Unix epoch (never 0, which means "does not
/// wait").
pub(crate) fn ticket() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// A waiting acquire's entry in the masters' queues: while armed, dropping it (the acquire
/// gave up, failed or was cancelled) takes the entry out on every master in the background, so
/// the waiters behind it need not wait out its grace. Disarmed when the lock is taken (taking
/// removes the entry).
pub(crate) struct QueueEntry {
    hold: Option<Hold>,
}

impl QueueEntry {
    /// The entry of `hold`'s acquisition (its lock value).
    pub(crate) fn new(hold: Hold) -> Self {
        QueueEntry { hold: Some(hold) }
    }

    /// The lock was taken: nothing to take out.
    pub(crate) fn disarm(&mut self) {
        self.hold = None;
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
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
