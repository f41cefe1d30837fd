//! The typed calls of the protocol `d2`, one per request (see `scripts` for the protocol and
//! its Lua sources): each places its keys and arguments and decodes its reply into an enum.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, Value};

use crate::lease::millis_ceil;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;
use crate::wire::request::{
    echoes, finish_pipeline, Call, ReplicaWait, Request, ACQUIRE_FENCED_SCRIPT,
    ACQUIRE_HANDED_SCRIPT, ACQUIRE_PERMIT_SCRIPT, ACQUIRE_QUEUED_SCRIPT, ACQUIRE_READ_SCRIPT,
    ACQUIRE_WRITE_SCRIPT, FENCE_FLOOR_SCRIPT, LEAVE_QUEUE_SCRIPT, RELEASE_MANY_SCRIPT,
    RELEASE_SCRIPT, RENEW_SCRIPT,
};
use crate::wire::scripts::{TURN_GRACE, VERSION_TAG, WRITER_INTENT};

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
        Some(v) if v == value => Acquired::Taken { token: None },
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
            .arg(millis_ceil(self.retention.max(self.ttl)))
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
        Some(match status {
            1 => Acquired::Taken {
                token: Some(u64::try_from(value).ok()?),
            },
            0 => Acquired::Busy {
                pttl: Some(value),
                pass: 0,
            },
            2 => Acquired::Incompatible,
            _ => return None,
        })
    }
}

/// What a permit's acquire found: as a lock's, or live holders that agreed on another count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitAcquired {
    /// Taken, busy (every permit held: `pttl` is when the first lease ends) or incompatible.
    Found(Acquired),
    /// The semaphore's live holders took it with this many permits.
    Mismatch { permits: u32 },
}

/// [`ACQUIRE_PERMIT`]: one permit of a semaphore of `permits`, plain or fenced.
pub(crate) struct PermitAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`: the holder's member.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// The semaphore's count, as this caller knows it.
    pub(crate) permits: u32,
    /// The fence floor's retention if the acquire hands out a fencing token.
    pub(crate) fenced: Option<Duration>,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

impl Call for PermitAcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = PermitAcquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_PERMIT_SCRIPT.evalsha();
        let retention = self.fenced.map_or(0, |r| millis_ceil(r.max(self.ttl)));
        cmd.arg(2)
            .arg(self.keys.lock())
            .arg(self.keys.fence())
            .arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(self.permits)
            .arg(retention)
            .arg(self.id);
        Request::Script(&ACQUIRE_PERMIT_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<PermitAcquired> {
        Some(PermitAcquired::Found(match status {
            1 => Acquired::Taken {
                token: match self.fenced {
                    Some(_) => Some(u64::try_from(value).ok()?),
                    None => None,
                },
            },
            0 => Acquired::Busy {
                pttl: Some(value),
                pass: 0,
            },
            2 => Acquired::Incompatible,
            3 => {
                return Some(PermitAcquired::Mismatch {
                    permits: u32::try_from(value).ok()?,
                })
            }
            _ => return None,
        }))
    }
}

/// Which side of a shared lock an [`RwAcquireCall`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// A shared (read) hold: [`ACQUIRE_READ`].
    Read,
    /// The lock, where readers may hold it: [`ACQUIRE_WRITE`]; `waits`: the caller waits, and
    /// marks its intent while busy (for [`WRITER_INTENT`]).
    Write { waits: bool },
}

/// [`ACQUIRE_READ`] or [`ACQUIRE_WRITE`]: a read hold, or a write hold that met readers.
pub(crate) struct RwAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    pub(crate) side: Side,
    /// The fence floor's retention if the acquire hands out a fencing token.
    pub(crate) fenced: Option<Duration>,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

impl Call for RwAcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let script = match self.side {
            Side::Read => &ACQUIRE_READ_SCRIPT,
            Side::Write { .. } => &ACQUIRE_WRITE_SCRIPT,
        };
        let mut cmd = script.evalsha();
        let retention = self.fenced.map_or(0, |r| millis_ceil(r.max(self.ttl)));
        cmd.arg(3)
            .arg(self.keys.lock())
            .arg(self.keys.fence())
            .arg(self.keys.writer())
            .arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(retention)
            .arg(self.id);
        if let Side::Write { waits } = self.side {
            cmd.arg(if waits { millis_ceil(WRITER_INTENT) } else { 0 });
        }
        Request::Script(script, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<Acquired> {
        Some(match status {
            1 => Acquired::Taken {
                token: match self.fenced {
                    Some(_) => Some(u64::try_from(value).ok()?),
                    None => None,
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
}

impl Call for QueuedAcquireCall<'_> {
    type Raw = (i64, i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_QUEUED_SCRIPT.evalsha();
        let retention = self.fenced.map_or(0, |r| millis_ceil(r.max(self.ttl)));
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
            .arg(if self.queue { "1" } else { "0" });
        Request::Script(&ACQUIRE_QUEUED_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, (status, value, ahead): (i64, i64, i64)) -> Option<Acquired> {
        let ahead = u32::try_from(ahead).ok()?;
        Some(match status {
            1 if self.fenced.is_some() => Acquired::Taken {
                token: Some(u64::try_from(value).ok()?),
            },
            1 => Acquired::Taken { token: None },
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
            2 => Acquired::Incompatible,
            _ => return None,
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
    /// Waiters are woken through sharded pub/sub (a cluster).
    pub(crate) sharded: bool,
}

impl Call for HandedAcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_HANDED_SCRIPT.evalsha();
        cmd.arg(3)
            .arg(self.keys.lock())
            .arg(self.keys.queue())
            .arg(self.keys.channel())
            .arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(self.id)
            .arg(self.ticket)
            .arg(millis_ceil(self.window))
            .arg(if self.sharded { "s" } else { "-" });
        Request::Script(&ACQUIRE_HANDED_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<Acquired> {
        Some(match status {
            1 => Acquired::Taken { token: None },
            // Held (maybe handed to an earlier waiter just now): a release hands it over.
            0 => Acquired::Busy {
                pttl: Some(value),
                pass: 0,
            },
            2 => Acquired::Incompatible,
            _ => return None,
        })
    }
}

/// [`LEAVE_QUEUE`]: a waiter whose acquire ended leaves the queue.
pub(crate) struct LeaveQueueCall<'a> {
    pub(crate) keys: &'a LockKeys,
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
        cmd.arg(if self.release.is_some() { 4 } else { 2 })
            .arg(self.keys.queue())
            .arg(self.keys.queue_until());
        if self.release.is_some() {
            cmd.arg(self.keys.lock()).arg(self.keys.channel());
        }
        cmd.arg(self.value)
            .arg(self.id)
            .arg(if self.release == Some(true) { "s" } else { "-" });
        Request::Script(&LEAVE_QUEUE_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, removed: i64) -> Option<bool> {
        Some(removed > 0)
    }
}

/// [`FENCE_FLOOR`]: read a lock's fence floor, or raise it to at least `raise_to`.
pub(crate) struct FenceFloorCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) id: &'a [u8],
    /// The token to raise the floor to (0: read only).
    pub(crate) raise_to: u64,
    /// How long the fence floor is kept.
    pub(crate) retention: Duration,
}

impl Call for FenceFloorCall<'_> {
    type Raw = i64;
    /// The floor before the raise (the floor, when only read).
    type Reply = u64;

    fn request(&self) -> Request {
        let mut cmd = FENCE_FLOOR_SCRIPT.evalsha();
        cmd.arg(1)
            .arg(self.keys.fence())
            .arg(self.id)
            .arg(self.raise_to)
            .arg(millis_ceil(self.retention));
        Request::Script(&FENCE_FLOOR_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, floor: i64) -> Option<u64> {
        u64::try_from(floor).ok()
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
    /// release (see `client::cohort`).
    pub(crate) next: Option<NextWaiter>,
}

/// A waiter of the releasing client that a release queues for the lock (`RELEASE`'s optional
/// arguments): its lock value and its ticket (`scripts::handed_ticket`).
#[derive(Clone, Copy)]
pub(crate) struct NextWaiter {
    /// `d2:<owner>` of the waiter's acquisition.
    pub(crate) value: ShortId,
    pub(crate) ticket: u64,
}

impl Call for ReleaseCall<'_> {
    type Raw = i64;
    type Reply = Released;

    fn request(&self) -> Request {
        let mut cmd = RELEASE_SCRIPT.evalsha();
        cmd.arg(if self.handoff { 3 } else { 2 })
            .arg(self.keys.lock())
            .arg(self.keys.channel());
        if self.handoff {
            cmd.arg(self.keys.queue());
        }
        cmd.arg(self.owner.as_bytes())
            .arg(self.id)
            .arg(millis_ceil(self.keep))
            .arg(if self.sharded { "s" } else { "-" });
        if let (true, Some(next)) = (self.handoff, self.next) {
            cmd.arg(next.value.as_bytes()).arg(next.ticket);
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
        cmd.arg(self.items.len() * 3);
        for item in self.items {
            cmd.arg(item.keys.lock())
                .arg(item.keys.channel())
                .arg(item.keys.queue());
        }
        cmd.arg(self.id).arg("-").arg(3);
        for item in self.items {
            cmd.arg(item.value.as_bytes()).arg(millis_ceil(item.keep));
            match &item.next {
                Some(next) => cmd.arg(next.value.as_bytes()).arg(next.ticket),
                None => cmd.arg("").arg(0),
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

/// One lease in a [`RenewCall`].
#[derive(Debug, Clone)]
pub(crate) struct RenewItem {
    pub(crate) key: Arc<str>,
    /// `d2:<owner>`.
    pub(crate) value: Arc<str>,
    pub(crate) ttl: Duration,
    /// A permit's semaphore count (0: a lock or a read hold): over a RedLock quorum a permit's
    /// renewal counts only when as many masters renewed it as its acquire needed
    /// (`quorum::permit_quorum`), a lock's by majority. Not sent.
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
    /// `quorum`). A failed renewal of this lock alone; never a reply of one master.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::request::Lua;

    const TTL: Duration = Duration::from_millis(10_000);
    const RETENTION: Duration = Duration::from_millis(60_000);

    /// A script call's script and its arguments after the SHA1, as text.
    fn sent(request: Request) -> (&'static Lua, Vec<String>) {
        let Request::Script(script, cmd) = request else {
            panic!("a script call");
        };
        let args = cmd
            .args_iter()
            .skip(2) // EVALSHA and the SHA1
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not a plain argument>".to_owned(),
            })
            .collect();
        (script, args)
    }

    /// A permit's (`Some(n)`) or a read's or write's shared-hold acquire, plain or fenced.
    fn shared_request(
        keys: &LockKeys,
        permits: Option<u32>,
        side: Side,
        fenced: Option<Duration>,
    ) -> Request {
        match permits {
            Some(permits) => PermitAcquireCall {
                keys,
                value: b"d2:o",
                id: b"r1",
                ttl: TTL,
                permits,
                fenced,
                wait: None,
            }
            .request(),
            None => RwAcquireCall {
                keys,
                value: b"d2:o",
                id: b"r1",
                ttl: TTL,
                side,
                fenced,
                wait: None,
            }
            .request(),
        }
    }

    #[test]
    fn a_shared_holds_acquire_sends_each_scripts_keys_and_arguments_in_their_order() {
        let keys = LockKeys::new("distlock", "k").unwrap();
        let (lock, fence, writer) = (keys.lock().to_owned(), keys.fence(), keys.writer());
        let strs = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();

        let (script, args) = sent(shared_request(&keys, Some(3), Side::Read, None));
        assert!(std::ptr::eq(script, &ACQUIRE_PERMIT_SCRIPT));
        let want = strs(&["2", &lock, &fence, "d2:o", "10000", "3", "0", "r1"]);
        assert_eq!(args, want, "a permit");
        let (_, args) = sent(shared_request(&keys, Some(3), Side::Read, Some(RETENTION)));
        let want = strs(&["2", &lock, &fence, "d2:o", "10000", "3", "60000", "r1"]);
        assert_eq!(args, want, "a fenced permit");

        let (script, args) = sent(shared_request(&keys, None, Side::Read, Some(RETENTION)));
        assert!(std::ptr::eq(script, &ACQUIRE_READ_SCRIPT));
        let want = strs(&["3", &lock, &fence, &writer, "d2:o", "10000", "60000", "r1"]);
        assert_eq!(args, want, "a fenced read");

        let write = |waits| Side::Write { waits };
        let (script, args) = sent(shared_request(&keys, None, write(true), None));
        assert!(std::ptr::eq(script, &ACQUIRE_WRITE_SCRIPT));
        let want = strs(&[
            "3", &lock, &fence, &writer, "d2:o", "10000", "0", "r1", "1000",
        ]);
        assert_eq!(args, want, "a waiting write");
        let (_, args) = sent(shared_request(&keys, None, write(false), None));
        let want = strs(&["3", &lock, &fence, &writer, "d2:o", "10000", "0", "r1", "0"]);
        assert_eq!(args, want, "a write that does not wait");
    }

    /// What a shared-hold acquire decodes `raw` into: found, or `Err(n)`: a permit count
    /// mismatch.
    fn shared_decode(
        permits: Option<u32>,
        side: Side,
        fenced: Option<Duration>,
        raw: (i64, i64),
    ) -> Option<Result<Acquired, u32>> {
        let keys = LockKeys::new("distlock", "k").unwrap();
        match permits {
            Some(permits) => {
                let call = PermitAcquireCall {
                    keys: &keys,
                    value: b"d2:o",
                    id: b"r1",
                    ttl: TTL,
                    permits,
                    fenced,
                    wait: None,
                };
                call.decode(raw).map(|found| match found {
                    PermitAcquired::Found(found) => Ok(found),
                    PermitAcquired::Mismatch { permits } => Err(permits),
                })
            }
            None => {
                let call = RwAcquireCall {
                    keys: &keys,
                    value: b"d2:o",
                    id: b"r1",
                    ttl: TTL,
                    side,
                    fenced,
                    wait: None,
                };
                call.decode(raw).map(Ok)
            }
        }
    }

    #[test]
    fn a_shared_holds_acquire_decodes_a_count_mismatch_for_a_permit_only() {
        let taken = |token| Some(Ok(Acquired::Taken { token }));
        let busy = Some(Ok(Acquired::Busy {
            pttl: Some(40),
            pass: 0,
        }));
        let write = Side::Write { waits: true };
        for (permits, side) in [(Some(2), Side::Read), (None, Side::Read), (None, write)] {
            assert_eq!(shared_decode(permits, side, None, (1, 0)), taken(None));
            assert_eq!(
                shared_decode(permits, side, Some(RETENTION), (1, 9)),
                taken(Some(9))
            );
            assert_eq!(shared_decode(permits, side, Some(RETENTION), (1, -9)), None);
            assert_eq!(shared_decode(permits, side, None, (0, 40)), busy);
            let incompatible = Some(Ok(Acquired::Incompatible));
            assert_eq!(shared_decode(permits, side, None, (2, 0)), incompatible);
            assert_eq!(shared_decode(permits, side, None, (4, 0)), None);
        }
        assert_eq!(
            shared_decode(Some(2), Side::Read, None, (3, 5)),
            Some(Err(5))
        );
        assert_eq!(shared_decode(Some(2), Side::Read, None, (3, -5)), None);
        assert_eq!(shared_decode(None, Side::Read, None, (3, 5)), None);
        assert_eq!(shared_decode(None, write, None, (3, 5)), None);
    }

    #[test]
    fn an_acquire_scripts_status_decodes_as_taken_busy_or_incompatible() {
        let keys = LockKeys::new("distlock", "k").unwrap();
        let taken = |token| Some(Acquired::Taken { token });
        let busy = Some(Acquired::Busy {
            pttl: Some(40),
            pass: 0,
        });
        let fenced = FencedAcquireCall {
            keys: &keys,
            value: b"d2:o",
            id: b"r1",
            ttl: TTL,
            retention: RETENTION,
            wait: None,
        };
        assert_eq!(fenced.decode((1, 7)), taken(Some(7)));
        assert_eq!(fenced.decode((1, -7)), None);
        assert_eq!(fenced.decode((0, 40)), busy);
        assert_eq!(fenced.decode((2, 0)), Some(Acquired::Incompatible));
        assert_eq!(fenced.decode((3, 2)), None);
        let handed = HandedAcquireCall {
            keys: &keys,
            value: b"d2:o",
            id: b"r1",
            ttl: TTL,
            ticket: 1,
            window: TTL,
            sharded: false,
        };
        assert_eq!(handed.decode((1, 0)), taken(None));
        assert_eq!(handed.decode((0, 40)), busy);
        assert_eq!(handed.decode((3, 2)), None);
    }
}
