//! The typed calls of a set of locks taken together (`distlock::lock_all`; see `scripts`,
//! "Sets of locks"): the all-or-none acquire and the set's release, each over the locks of one
//! call (the whole set, or in a cluster the set's locks of one hash slot).

use std::time::Duration;

use crate::lease::millis_ceil;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;
use crate::wire::request::{Call, ReplicaWait, Request, ACQUIRE_ALL_SCRIPT, RELEASE_MANY_SCRIPT};

use super::lock::{released, Acquired, Released};
use super::shared::Turn;

/// What a set's acquire found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SetAcquired {
    /// Taken (every lock of the call), busy or incompatible (at lock `at`); a taken set's
    /// tokens are in `tokens`, not in `found`.
    pub(crate) found: Acquired,
    /// The lock of the call (0-based, in the call's order) that was busy or incompatible.
    pub(crate) at: usize,
    /// One fencing token per lock of the call, in its order (empty when not fenced).
    pub(crate) tokens: Vec<u64>,
}

/// [`ACQUIRE_ALL`](crate::wire::scripts::ACQUIRE_ALL): every lock of `keys`, or none.
pub(crate) struct SetAcquireCall<'a> {
    pub(crate) keys: &'a [LockKeys],
    /// `d2:<owner>`: the set's one value.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// The fence floors' retention if the acquire hands out fencing tokens.
    pub(crate) fenced: Option<Duration>,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
    /// A waiter in its turn (one server, Sentinel, a cluster whose set lies in one hash
    /// slot): queued at the lock it finds held, and handed it by its release (see
    /// [`ACQUIRE_ALL`](crate::wire::scripts::ACQUIRE_ALL)).
    pub(crate) turn: Option<Turn>,
}

impl Call for SetAcquireCall<'_> {
    type Raw = Vec<i64>;
    type Reply = SetAcquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_ALL_SCRIPT.evalsha();
        let retention = self.fenced.map_or(0, |r| millis_ceil(r.max(self.ttl)));
        let per = if self.turn.is_some() { 5 } else { 2 };
        cmd.arg(self.keys.len() * per);
        for keys in self.keys {
            cmd.arg(keys.lock()).arg(keys.fence());
            if self.turn.is_some() {
                cmd.arg(keys.queue())
                    .arg(keys.channel())
                    .arg(keys.queue_ids());
            }
        }
        cmd.arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(retention)
            .arg(self.id);
        if let Some(turn) = self.turn {
            cmd.arg(turn.ticket)
                .arg(if turn.sharded { "s" } else { "-" })
                .arg(turn.life);
        }
        Request::Script(&ACQUIRE_ALL_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, raw: Vec<i64>) -> Option<SetAcquired> {
        let at = |i: i64| {
            let at = usize::try_from(i).ok()?.checked_sub(1)?;
            (at < self.keys.len()).then_some(at)
        };
        Some(match raw.as_slice() {
            [1, tokens @ ..] if tokens.len() == self.keys.len() => SetAcquired {
                found: Acquired::Taken { token: None },
                at: 0,
                tokens: match self.fenced {
                    Some(_) => tokens
                        .iter()
                        .map(|&t| u64::try_from(t).ok())
                        .collect::<Option<_>>()?,
                    None => Vec::new(),
                },
            },
            &[0, pttl, i] => SetAcquired {
                found: Acquired::Busy {
                    pttl: Some(pttl),
                    pass: 0,
                },
                at: at(i)?,
                tokens: Vec::new(),
            },
            &[2, _, i] => SetAcquired {
                found: Acquired::Incompatible,
                at: at(i)?,
                tokens: Vec::new(),
            },
            _ => return None,
        })
    }
}

/// `RELEASE_MANY` of the locks of a set (or of its locks of one hash slot): each compared
/// with the set's value and deleted (or left to expire at `keep`), its waiters woken.
pub(crate) struct SetReleaseCall<'a> {
    pub(crate) keys: &'a [LockKeys],
    /// `d2:<owner>`: the set's one value.
    pub(crate) owner: &'a ShortId,
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    /// `min_hold` not reached yet: leave the locks to expire after this long (zero: delete).
    pub(crate) keep: Duration,
    /// Notify waiters through sharded pub/sub (a cluster).
    pub(crate) sharded: bool,
    /// Hand each lock to the first waiter queued for it (not over RedLock).
    pub(crate) handoff: bool,
}

impl Call for SetReleaseCall<'_> {
    type Raw = Vec<i64>;
    /// What the release found, the worst of its locks: released only if every lock was ours.
    type Reply = Released;

    fn request(&self) -> Request {
        let per = if self.handoff { 4 } else { 2 };
        let mut cmd = RELEASE_MANY_SCRIPT.evalsha();
        cmd.arg(self.keys.len() * per);
        for keys in self.keys {
            cmd.arg(keys.lock()).arg(keys.channel());
            if self.handoff {
                cmd.arg(keys.queue()).arg(keys.queue_ids());
            }
        }
        cmd.arg(self.id)
            .arg(if self.sharded { "s" } else { "-" })
            .arg(per);
        let keep = millis_ceil(self.keep);
        for _ in self.keys {
            cmd.arg(self.owner.as_bytes()).arg(keep);
            if self.handoff {
                // No next waiter to queue (see `ReleaseManyCall`).
                cmd.arg("").arg(0).arg("").arg(0);
            }
        }
        Request::Script(&RELEASE_MANY_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, codes: Vec<i64>) -> Option<Released> {
        if codes.len() != self.keys.len() {
            return None;
        }
        let found = codes
            .into_iter()
            .map(released)
            .collect::<Option<Vec<_>>>()?;
        Some(worst(&found))
    }
}

/// What a release of several locks found, as one answer: released if every lock was ours;
/// otherwise another owner's (one was taken from under us), not a lock, or gone, in that order.
pub(crate) fn worst(found: &[Released]) -> Released {
    [
        Released::OtherOwner,
        Released::Incompatible,
        Released::Absent,
    ]
    .into_iter()
    .find(|bad| found.contains(bad))
    .unwrap_or(Released::Yes)
}
