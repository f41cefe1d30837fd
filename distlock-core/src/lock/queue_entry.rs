//! A waiting acquire's entry in the waiters' queue next to the lock, as a guard: dropped, it
//! takes the entry out in the background (and lets go a lock handed to the waiter meanwhile),
//! as `hold::ReleaseOnDrop` undoes a take that may have been applied.

use crate::client::waiting::cohort::Deferral;
use crate::client::Client;
use crate::error::Operation;
use crate::wire::calls::LeaveQueueCall;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;

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
    /// The lock, or a set's locks (the set waits in one lock's queue at a time).
    keys: Vec<LockKeys>,
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
    /// The entry of the waiter `value` of the lock `keys` (a set: its locks); `handed` where a
    /// release may hand the lock to it (not over RedLock).
    pub(crate) fn new(client: Client, keys: Vec<LockKeys>, value: ShortId, handed: bool) -> Self {
        let release = handed.then(|| client.publishes_sharded());
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

    /// The waiter sends an attempt of its own that queues it: one that waited in the client
    /// may be in the queue in Redis from now on, and leaves it when it goes away (see
    /// `client::waiting::cohort`).
    pub(crate) fn queuing(&mut self) {
        if let Some(deferral) = self.deferral.as_mut() {
            deferral.queuing();
        }
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
            let name = keys[0].name();
            if let Err(error) = client.call(Operation::Acquire, name, &call).await {
                tracing::debug!(key = %name, %error, "leaving the waiters' queue failed; the entry lapses by itself");
            }
        });
    }
}
