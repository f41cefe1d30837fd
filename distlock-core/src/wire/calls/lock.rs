//! A lock's calls: the plain acquire (`SET NX PX GET`, no script, also pipelined in a group
//! commit), the fenced, RedLock's queued and a handed waiter's acquire, a waiter leaving its
//! queue, and the release of one lock or many; with what an acquire and a release find, the
//! answers the other kinds' calls give too.

use std::time::Duration;

use tokio::time::Instant;

use redis::{Cmd, Pipeline, Value};

use crate::lease::{fence_kept, millis_ceil};
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;
use crate::wire::request::{
    echoes, finish_pipeline, Call, ReplicaWait, Request, ACQUIRE_FENCED_SCRIPT,
    ACQUIRE_HANDED_SCRIPT, ACQUIRE_QUEUED_SCRIPT, LEAVE_QUEUE_SCRIPT, RELEASE_MANY_SCRIPT,
    RELEASE_SCRIPT,
};
use crate::wire::scripts::{entry_life, TURN_GRACE, VERSION_TAG, WAITERS_MARK};

/// What an acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken (or a replay of our own take after a lost reply); the fencing token if asked for.
    Taken { token: Option<u64> },
    /// Held by another owner; its remaining ttl in ms (-1: no expiry; `None`: not asked).
    /// Over a RedLock quorum also free but another waiter's turn first, for at most `pttl`.
    /// `pass`: release wakes the waiter lets pass before it retries, because the waiters
    /// queued ahead of it take those turns (RedLock; 0 elsewhere).
    Busy { pttl: Option<i64>, pass: u32 },
    /// Readers hold the lock: a writer waiting in its turn is queued behind them (see
    /// [`ACQUIRE_HANDED`]); the first reader's lease ends in `pttl` ms.
    Readers { pttl: i64 },
    /// The key holds something that is not a lock of this protocol.
    Incompatible,
}

/// A plain acquire: `SET NX PX GET` (and `PTTL` when the caller will wait), no script.
pub(crate) struct AcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The lock's value, `d2:<owner>`.
    pub(crate) owner: &'a ShortId,
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// Also ask for the holder's remaining ttl (the caller waits when the lock is busy).
    pub(crate) want_pttl: bool,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

impl Call for AcquireCall<'_> {
    type Raw = Vec<Value>;
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut pipe = redis::Pipeline::with_capacity(4);
        // Error replies stay in the reply (a `WRONGTYPE` says "not a lock of this protocol").
        pipe.ignore_errors();
        add_acquire(
            &mut pipe,
            self.keys,
            self.owner.as_bytes(),
            self.ttl,
            self.want_pttl,
        );
        finish_pipeline(pipe, self.wait, self.id)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, raw: Vec<Value>) -> Option<Acquired> {
        let mut raw = raw.into_iter();
        let acquired = decode_acquire(&mut raw, self.owner.as_bytes(), self.want_pttl)?;
        raw.next().is_none().then_some(acquired)
    }
}

/// Appends a plain acquire's commands to `pipe`: `SET lock value NX PX ttl GET`, and `PTTL
/// lock` when the caller will wait.
pub(crate) fn add_acquire(
    pipe: &mut Pipeline,
    keys: &LockKeys,
    value: &[u8],
    ttl: Duration,
    want_pttl: bool,
) {
    pipe.cmd("SET")
        .arg(keys.lock())
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(millis_ceil(ttl))
        .arg("GET");
    if want_pttl {
        pipe.cmd("PTTL").arg(keys.lock());
    }
}

/// Decodes a plain acquire's replies (taken from `raw`, as [`add_acquire`] asked for them) for
/// the lock value `value`; `None` if they are not replies to such a request.
pub(crate) fn decode_acquire(
    raw: &mut impl Iterator<Item = Value>,
    value: &[u8],
    want_pttl: bool,
) -> Option<Acquired> {
    let first = raw.next()?;
    // Both replies are taken before deciding, so a batch's next request starts at its own.
    let pttl = match want_pttl {
        true => Some(redis::from_redis_value::<i64>(raw.next()?).ok()?),
        false => None,
    };
    let previous = match first {
        // `SET ... GET` on a key of another type: a lock of an older distlock (a hash).
        Value::ServerError(e) if e.code() == "WRONGTYPE" => return Some(Acquired::Incompatible),
        Value::Nil => None,
        Value::BulkString(bytes) => Some(bytes),
        _ => return None,
    };
    Some(match previous {
        None => Acquired::Taken { token: None },
        // Our own, marked or not by a waiter since (`marks_prelude!`).
        Some(v) if v.strip_suffix(&[WAITERS_MARK as u8]).unwrap_or(&v) == value => {
            Acquired::Taken { token: None }
        }
        Some(v) if v.starts_with(VERSION_TAG.as_bytes()) => Acquired::Busy { pttl, pass: 0 },
        Some(_) => Acquired::Incompatible,
    })
}

/// An acquire that also hands out a fencing token ([`ACQUIRE_FENCED`]).
pub(crate) struct FencedAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// How long the fence floor is kept (at least the ttl).
    pub(crate) retention: Duration,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

impl Call for FencedAcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_FENCED_SCRIPT.evalsha();
        cmd.arg(2)
            .arg(self.keys.lock())
            .arg(self.keys.fence())
            .arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(millis_ceil(fence_kept(self.retention, self.ttl)))
            .arg(self.id);
        Request::Script(&ACQUIRE_FENCED_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<Acquired> {
        script_acquired(status, value, true)
    }
}

/// What an acquire script's `{status, value}` says: 1 taken (`value`: the fencing token, when
/// `fenced`), 0 held by another owner (`value`: its pttl) or 2 not a lock of this kind; `None`
/// for any other status.
pub(super) fn script_acquired(status: i64, value: i64, fenced: bool) -> Option<Acquired> {
    Some(match status {
        1 => Acquired::Taken {
            token: match fenced {
                true => Some(u64::try_from(value).ok()?),
                false => None,
            },
        },
        0 => Acquired::Busy {
            pttl: Some(value),
            pass: 0,
        },
        2 => Acquired::Incompatible,
        _ => return None,
    })
}

/// [`ACQUIRE_QUEUED`]: an acquire over a RedLock quorum, plain or fenced, that takes a free
/// lock only in its waiters' order.
pub(crate) struct QueuedAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// The fence floor's retention if the acquire hands out a fencing token.
    pub(crate) fenced: Option<Duration>,
    /// The caller's place in the queue (its clock in µs when the acquire started); 0: it does
    /// not wait, and queues nowhere.
    pub(crate) ticket: u64,
    /// Queue the caller (a waiter's attempts after it subscribed); otherwise the ticket only
    /// says whether waiters are ahead of it.
    pub(crate) queue: bool,
    /// The longest the caller's entry lives (ms, `scripts::entry_life`): its
    /// wait's end at the latest.
    pub(crate) life: u64,
}

impl Call for QueuedAcquireCall<'_> {
    type Raw = (i64, i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_QUEUED_SCRIPT.evalsha();
        let retention = self
            .fenced
            .map_or(0, |r| millis_ceil(fence_kept(r, self.ttl)));
        cmd.arg(4)
            .arg(self.keys.lock())
            .arg(self.keys.fence())
            .arg(self.keys.queue())
            .arg(self.keys.queue_until())
            .arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(retention)
            .arg(self.id)
            .arg(self.ticket)
            .arg(millis_ceil(TURN_GRACE))
            .arg(if self.queue { "1" } else { "0" })
            .arg(self.life);
        Request::Script(&ACQUIRE_QUEUED_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, (status, value, ahead): (i64, i64, i64)) -> Option<Acquired> {
        let ahead = u32::try_from(ahead).ok()?;
        Some(match status {
            // Held: each waiter ahead takes a turn after a release, then it is ours.
            0 => Acquired::Busy {
                pttl: Some(value),
                pass: ahead,
            },
            // Free, the first of those ahead taking it now (no release before its turn).
            3 => Acquired::Busy {
                pttl: Some(value),
                pass: ahead.saturating_sub(1),
            },
            _ => return script_acquired(status, value, self.fenced.is_some()),
        })
    }
}

/// [`ACQUIRE_HANDED`]: a waiting plain lock's attempt once it queued, on one server,
/// Sentinel or a cluster, where a release hands the lock to the first waiter of the queue.
pub(crate) struct HandedAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// The waiter's ticket (`scripts::handed_ticket`, which carries the window too).
    pub(crate) ticket: u64,
    /// The grant window (`scripts::grant_window`).
    pub(crate) window: Duration,
    /// The longest the waiter's queue entry lives unless a later attempt renews it (ms,
    /// `scripts::entry_life`): a waiter whose process died, or whose wait
    /// ended, is never handed the lock after that.
    pub(crate) life: u64,
    /// Waiters are woken through sharded pub/sub (a cluster).
    pub(crate) sharded: bool,
    /// A confirming waiter (see [`ACQUIRE_HANDED`]): `Some` with the fence retention if it
    /// is fenced (`Some(None)`: not fenced, it asks for replicas). `None`: a plain waiter.
    pub(crate) confirm: Option<Option<Duration>>,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

impl Call for HandedAcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_HANDED_SCRIPT.evalsha();
        cmd.arg(if self.confirm.is_some() { 6 } else { 5 })
            .arg(self.keys.lock())
            .arg(self.keys.queue())
            .arg(self.keys.channel())
            .arg(self.keys.queue_ids())
            .arg(self.keys.queue_until());
        if self.confirm.is_some() {
            // The fence key is a key of the script even when not fenced (retention 0).
            cmd.arg(self.keys.fence());
        }
        cmd.arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(self.id)
            .arg(self.ticket)
            .arg(millis_ceil(self.window))
            .arg(if self.sharded { "s" } else { "-" })
            .arg(self.life);
        if let Some(fenced) = self.confirm {
            cmd.arg(fenced.map_or(0, |r| millis_ceil(r.max(self.ttl))));
        }
        Request::Script(&ACQUIRE_HANDED_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<Acquired> {
        // Busy: held (maybe handed to an earlier waiter just now), a release hands it over.
        match status {
            3 => Some(Acquired::Readers { pttl: value }),
            _ => script_acquired(status, value, self.confirm.is_some_and(|f| f.is_some())),
        }
    }
}

/// [`LEAVE_QUEUE`]: a waiter whose acquire ended leaves the queue (of each lock of its set).
pub(crate) struct LeaveQueueCall<'a> {
    /// The lock, or a set's locks (one server, Sentinel, a cluster: one hash slot).
    pub(crate) keys: &'a [LockKeys],
    /// `d2:<owner>`: the entry.
    pub(crate) value: &'a [u8],
    pub(crate) id: &'a [u8],
    /// One server, Sentinel, a cluster (where a release may have handed the lock to this
    /// waiter): release the lock too if it holds the entry's value, and hand it on; `Some`
    /// says whether the release channel is sharded. `None` over RedLock.
    pub(crate) release: Option<bool>,
}

impl Call for LeaveQueueCall<'_> {
    type Raw = i64;
    /// True if the entry was there.
    type Reply = bool;

    fn request(&self) -> Request {
        let mut cmd = LEAVE_QUEUE_SCRIPT.evalsha();
        let per = if self.release.is_some() { 5 } else { 2 };
        cmd.arg(per * self.keys.len());
        for keys in self.keys {
            cmd.arg(keys.queue()).arg(keys.queue_until());
            if self.release.is_some() {
                cmd.arg(keys.lock())
                    .arg(keys.channel())
                    .arg(keys.queue_ids());
            }
        }
        cmd.arg(self.value)
            .arg(self.id)
            .arg(if self.release == Some(true) { "s" } else { "-" })
            .arg(per);
        Request::Script(&LEAVE_QUEUE_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, removed: i64) -> Option<bool> {
        Some(removed > 0)
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Released (or left to expire at `min_hold`).
    Yes,
    /// The lock is held by another owner: nothing changed.
    OtherOwner,
    /// No lock: it expired (or a replayed release already freed it).
    Absent,
    /// The key is not a lock of this protocol: nothing changed.
    Incompatible,
}

/// [`RELEASE`] of a lock.
pub(crate) struct ReleaseCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The lock's value, `d2:<owner>`.
    pub(crate) owner: &'a ShortId,
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    /// `min_hold` not reached yet: leave the lock to expire after this long (zero: delete it).
    pub(crate) keep: Duration,
    /// Notify waiters through sharded pub/sub (a cluster).
    pub(crate) sharded: bool,
    /// Hand the lock to the first waiter queued for it (one server, Sentinel, a cluster; not
    /// over RedLock).
    pub(crate) handoff: bool,
    /// With `handoff`: the releasing client's next waiter for the lock, queued by this
    /// release (see `client::waiting::cohort`).
    pub(crate) next: Option<NextWaiter>,
}

/// A waiter of the releasing client that a release queues for the lock (`RELEASE`'s optional
/// arguments): its lock value, its ticket (`scripts::handed_ticket`), the id its grant will
/// name (the waiter trusts a grant naming it from when the release was made) and the life of
/// its entry (from when its wait ends: `scripts::entry_life`).
#[derive(Clone, Copy)]
pub(crate) struct NextWaiter {
    /// `d2:<owner>` of the waiter's acquisition.
    pub(crate) value: ShortId,
    pub(crate) ticket: u64,
    pub(crate) id: ShortId,
    /// When the waiter's wait ends.
    pub(crate) until: Option<Instant>,
}

impl NextWaiter {
    /// Its entry's life, if a release queues it now (ms).
    fn life(&self) -> u64 {
        entry_life(self.until)
    }
}

impl Call for ReleaseCall<'_> {
    type Raw = i64;
    type Reply = Released;

    fn request(&self) -> Request {
        let mut cmd = RELEASE_SCRIPT.evalsha();
        cmd.arg(if self.handoff { 4 } else { 2 })
            .arg(self.keys.lock())
            .arg(self.keys.channel());
        if self.handoff {
            cmd.arg(self.keys.queue()).arg(self.keys.queue_ids());
        }
        cmd.arg(self.owner.as_bytes())
            .arg(self.id)
            .arg(millis_ceil(self.keep))
            .arg(if self.sharded { "s" } else { "-" });
        if let (true, Some(next)) = (self.handoff, self.next) {
            cmd.arg(next.value.as_bytes())
                .arg(next.ticket)
                .arg(next.id.as_bytes())
                .arg(next.life());
        }
        Request::Script(&RELEASE_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, code: i64) -> Option<Released> {
        released(code)
    }
}

/// The meaning of a release script's code.
pub(crate) fn released(code: i64) -> Option<Released> {
    Some(match code {
        0 => Released::Yes,
        -1 => Released::OtherOwner,
        -2 => Released::Absent,
        -3 => Released::Incompatible,
        _ => return None,
    })
}

/// One lock of a [`ReleaseManyCall`].
#[derive(Clone)]
pub(crate) struct ReleaseItem {
    pub(crate) keys: LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: ShortId,
    /// `min_hold` not reached yet: leave the lock to expire after this long (zero: delete it).
    pub(crate) keep: Duration,
    /// The releasing client's next waiter for the lock, queued by the release.
    pub(crate) next: Option<NextWaiter>,
}

impl From<&ReleaseCall<'_>> for ReleaseItem {
    /// The same release, as one lock of a group's `RELEASE_MANY`.
    fn from(call: &ReleaseCall<'_>) -> Self {
        ReleaseItem {
            keys: call.keys.clone(),
            value: *call.owner,
            keep: call.keep,
            next: call.next,
        }
    }
}

/// [`RELEASE_MANY`] of several locks (standalone Redis: their keys need not share a slot),
/// each handed to the first waiter queued for it.
pub(crate) struct ReleaseManyCall<'a> {
    pub(crate) id: &'a [u8],
    pub(crate) items: &'a [ReleaseItem],
}

impl ReleaseManyCall<'_> {
    /// The `EVALSHA` command (also sent inside a batch's pipeline).
    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = RELEASE_MANY_SCRIPT.evalsha();
        cmd.arg(self.items.len() * 4);
        for item in self.items {
            cmd.arg(item.keys.lock())
                .arg(item.keys.channel())
                .arg(item.keys.queue())
                .arg(item.keys.queue_ids());
        }
        cmd.arg(self.id).arg("-").arg(4);
        for item in self.items {
            cmd.arg(item.value.as_bytes()).arg(millis_ceil(item.keep));
            match &item.next {
                Some(next) => cmd
                    .arg(next.value.as_bytes())
                    .arg(next.ticket)
                    .arg(next.id.as_bytes())
                    .arg(next.life()),
                None => cmd.arg("").arg(0).arg("").arg(0),
            };
        }
        cmd
    }

    /// Decodes the script's reply (`{id, codes}`): one result per lock, or `None` if the
    /// reply answers another request.
    pub(crate) fn decode_reply(&self, reply: Value) -> Option<Vec<Released>> {
        let (echoed, codes): (Value, Vec<i64>) = redis::from_redis_value(reply).ok()?;
        if !echoes(&echoed, self.id) {
            return None;
        }
        self.decode(codes)
    }
}

impl Call for ReleaseManyCall<'_> {
    type Raw = Vec<i64>;
    type Reply = Vec<Released>;

    fn request(&self) -> Request {
        Request::Script(&RELEASE_MANY_SCRIPT, self.command())
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, codes: Vec<i64>) -> Option<Vec<Released>> {
        if codes.len() != self.items.len() {
            return None;
        }
        codes.into_iter().map(released).collect()
    }
}
