//! The waiters' queue, the client's side: a waiting acquire's ticket (its place in the queue
//! kept next to the lock, see `scripts::ACQUIRE_QUEUED`) and the entry it takes out again when
//! it leaves without the lock.
//!
//! Over a RedLock quorum a release wakes the waiters of every client at once. Each master
//! grants a free lock only to the caller with the lowest ticket it has queued, and the ticket
//! is the same on every master (the caller's clock when its acquire started), so the masters
//! agree on whose turn it is: the waiters no longer split them, and a client that releases
//! and asks again at once queues behind the waiters instead of taking the lock back before
//! their wake-ups arrive. Tickets from hosts whose clocks disagree are ordered by those clocks
//! (a host ahead by a second queues behind waiters that came up to a second later).
//!
//! On one server, Sentinel and a cluster the queue serves a plain lock's waiters of every
//! client, and the release itself hands the lock to the first of them (see `lock::waiting`,
//! "Handoff"): the same tickets order them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::waiting::cohort::Deferral;
use crate::client::Client;
use crate::error::Operation;
use crate::wire::calls::LeaveQueueCall;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;
use crate::wire::scripts;

/// Where an acquire attempt stands in the waiters' queue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Place {
    /// The acquire's ticket (0: it does not wait, and queues nowhere).
    pub(crate) ticket: u64,
    /// Queue the caller with this attempt (a waiter's attempts after it subscribed).
    pub(crate) queue: bool,
    /// One server, Sentinel, a cluster: the grant window of a waiter to whom a release may hand
    /// the lock (its queued attempts go as `ACQUIRE_HANDED`); `None` otherwise.
    pub(crate) window: Option<Duration>,
    /// Such a waiter does not trust a grant but confirms it with one more attempt, which finds
    /// the lock its own: a fenced waiter (its token is raised then) or one that asks for
    /// replicas (their acknowledgement is waited for then). See `scripts::ACQUIRE_HANDED`.
    pub(crate) confirm: bool,
}

/// A waiting acquire's ticket: now, in µs since the Unix epoch (never 0, which means "does not
/// wait").
pub(crate) fn ticket() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// The ticket of a waiter to whom a release may hand the lock (one server, Sentinel, a
/// cluster): its start in ms, with its grant `window` (`scripts::handed_ticket`).
pub(crate) fn handed_ticket(window: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
    scripts::handed_ticket(ms, window)
}

/// A waiting acquire's entry in the masters' queues, made before its first queuing attempt:
/// dropping it (the acquire gave up, failed, was cancelled or took the lock) takes the entry out
/// on every master in the background. Without it a waiter that went away would hold the
/// waiters behind it up for the grace, and so would one that took the lock: taking removes the
/// entry where the lock was granted, but a master that refused it (its old holder's release had
/// not arrived yet) would keep it ahead of everyone until it lapsed (with 2 of 5 masters down,
/// that master's refusal stalls every handoff). An acquire that takes the lock at its first
/// attempt never queued.
///
/// On one server, Sentinel or a cluster (a plain lock's waiter, to whom a release may hand the
/// lock: `waiting`), a waiter that leaves without the lock also releases it if a release
/// handed it over meanwhile, and hands it on (`LEAVE_QUEUE` with the lock); one that took it
/// sends nothing ([`QueueEntry::took`]): taking, or being handed the lock, removed its entry.
pub(crate) struct QueueEntry {
    client: Client,
    keys: LockKeys,
    /// The waiter's value (its lock value once taken).
    value: ShortId,
    /// One server, Sentinel, a cluster: `Some(sharded)`, see [`LeaveQueueCall::release`].
    release: Option<bool>,
    /// Leave the queue when dropped.
    armed: bool,
    /// A waiter that waited in the client (`client::waiting::cohort`): it leaves the queue only once it
    /// is there, and after the release that queued it.
    deferral: Option<Deferral>,
}

impl QueueEntry {
    /// The entry of the waiter `value` of the lock `keys`; `handed` where a release may hand
    /// the lock to it (not over RedLock).
    pub(crate) fn new(client: Client, keys: LockKeys, value: ShortId, handed: bool) -> Self {
        let release = handed.then(|| client.sharded_pubsub());
        QueueEntry {
            client,
            keys,
            value,
            release,
            armed: true,
            deferral: None,
        }
    }

    /// The entry of a waiter that waits in the client until a release of the client queues it
    /// (see `client::waiting::cohort`).
    pub(crate) fn deferred(mut self, deferral: Option<Deferral>) -> Self {
        self.deferral = deferral;
        self
    }

    /// The acquire took the lock: where a release hands locks over, nothing is left to take
    /// out (and the lock must not be released); over RedLock the entry still leaves.
    pub(crate) fn took(&mut self) {
        if self.release.is_some() {
            self.armed = false;
        }
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.deferral.as_ref().is_some_and(|d| !d.leaving()) {
            return;
        }
        let (client, keys, value) = (self.client.clone(), self.keys.clone(), self.value);
        let release = self.release;
        self.client.spawn_cleanup(async move {
            let id = client.new_request_id();
            let call = LeaveQueueCall {
                keys: &keys,
                value: value.as_bytes(),
                id: id.as_bytes(),
                release,
            };
            let name = keys.name();
            if let Err(error) = client.call(Operation::Acquire, name, &call).await {
                tracing::debug!(key = %name, %error, "leaving the waiters' queue failed; the entry lapses by itself");
            }
        });
    }
}
