//! The acquire call of the holds several holders share at one key, and of the lock where they
//! may hold it: a semaphore's permit, a read hold, a write that met readers (one call for three
//! scripts, by its kind `Shared`), in its turn for a waiter queued where a release hands the
//! hold over (`Turn`).

use std::time::Duration;

use crate::lease::{fence_kept, millis_ceil};
use crate::wire::keys::LockKeys;
use crate::wire::request::{
    Call, ReplicaWait, Request, ACQUIRE_PERMIT_SCRIPT, ACQUIRE_READ_SCRIPT, ACQUIRE_WRITE_SCRIPT,
};
use crate::wire::scripts::WRITER_INTENT;
#[cfg(doc)]
use crate::wire::scripts::{ACQUIRE_PERMIT, ACQUIRE_READ, ACQUIRE_WRITE};

use super::lock::{script_acquired, Acquired};

/// What a shared hold's acquire found: as a lock's, or live holders that agreed on another
/// count of permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SharedAcquired {
    /// Taken, busy (every permit held, a writer or readers there: `pttl` is when the first of
    /// them ends) or incompatible.
    Found(Acquired),
    /// The semaphore's live holders took it with this many permits (a permit's acquire only).
    Mismatch { permits: u32 },
}

/// Which hold a [`SharedAcquireCall`] takes: one of those several holders share, or the lock
/// where they may hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shared {
    /// One permit of a semaphore of this many, as this caller knows the count:
    /// [`ACQUIRE_PERMIT`].
    Permits(u32),
    /// A shared (read) hold: [`ACQUIRE_READ`].
    Read,
    /// The lock, where readers may hold it: [`ACQUIRE_WRITE`]; `waits`: the caller waits, and
    /// marks its intent while busy (for [`WRITER_INTENT`]).
    Write { waits: bool },
}

impl Shared {
    /// The permit count its grants are counted by over a RedLock quorum
    /// (`count::permit_quorum`): 0 for a read or a write, which count by majority.
    pub(crate) fn permits(self) -> u32 {
        match self {
            Shared::Permits(permits) => permits,
            Shared::Read | Shared::Write { .. } => 0,
        }
    }
}

/// [`ACQUIRE_PERMIT`], [`ACQUIRE_READ`] or [`ACQUIRE_WRITE`]: a semaphore's permit, a read
/// hold, or a write hold that met readers, plain or fenced.
pub(crate) struct SharedAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`: the holder's member (a permit, a read) or the lock's value (a write).
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    pub(crate) shared: Shared,
    /// The fence floor's retention if the acquire hands out a fencing token.
    pub(crate) fenced: Option<Duration>,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
    /// A permit's or a read's waiter in its turn (one server, Sentinel, a cluster): queued,
    /// and handed a permit or a share by a release (see [`ACQUIRE_PERMIT`], [`ACQUIRE_READ`]);
    /// a read not queued (ticket 0) still lets the waiters queued ahead of it go first.
    /// Ignored for a write.
    pub(crate) turn: Option<Turn>,
}

/// A waiter's place in the queue a release hands a hold over from (a permit, a read hold, a
/// set's lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    /// Its ticket (`scripts::handed_ticket`: its arrival, and its grant window; 0 for a read
    /// that does not queue).
    pub(crate) ticket: u64,
    /// Waiters are woken through sharded pub/sub (a cluster).
    pub(crate) sharded: bool,
    /// The longest its queue entry lives unless a later attempt renews it (ms,
    /// `scripts::entry_life`).
    pub(crate) life: u64,
}

impl Call for SharedAcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = SharedAcquired;

    fn request(&self) -> Request {
        let script = match self.shared {
            Shared::Permits(_) => &ACQUIRE_PERMIT_SCRIPT,
            Shared::Read => &ACQUIRE_READ_SCRIPT,
            Shared::Write { .. } => &ACQUIRE_WRITE_SCRIPT,
        };
        let mut cmd = script.evalsha();
        let retention = self
            .fenced
            .map_or(0, |r| millis_ceil(fence_kept(r, self.ttl)));
        // A semaphore has no writer's intent to look at; its count goes before the retention.
        // A permit's or a read's turn adds the queue, release channel and ids, then the ticket.
        let turn = self
            .turn
            .filter(|_| !matches!(self.shared, Shared::Write { .. }));
        let keys = match self.shared {
            Shared::Permits(_) => 2,
            Shared::Read | Shared::Write { .. } => 3,
        };
        // A read's turn also adds the writers' lapses (`queue:until`): 3 + 4 keys, a permit's
        // 2 + 3.
        let queued = match (turn, keys) {
            (None, _) => 0,
            (Some(_), 2) => 3,
            (Some(_), _) => 4,
        };
        cmd.arg(keys + queued)
            .arg(self.keys.lock())
            .arg(self.keys.fence());
        if keys == 3 {
            cmd.arg(self.keys.writer());
        }
        if turn.is_some() {
            cmd.arg(self.keys.queue())
                .arg(self.keys.channel())
                .arg(self.keys.queue_ids());
            if keys == 3 {
                cmd.arg(self.keys.queue_until());
            }
        }
        cmd.arg(self.value).arg(millis_ceil(self.ttl));
        if let Shared::Permits(permits) = self.shared {
            cmd.arg(permits);
        }
        cmd.arg(retention).arg(self.id);
        if let Shared::Write { waits } = self.shared {
            cmd.arg(if waits { millis_ceil(WRITER_INTENT) } else { 0 });
        }
        if let Some(turn) = turn {
            cmd.arg(turn.ticket)
                .arg(if turn.sharded { "s" } else { "-" })
                .arg(turn.life);
        }
        Request::Script(script, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<SharedAcquired> {
        match (status, self.shared) {
            (3, Shared::Permits(_)) => Some(SharedAcquired::Mismatch {
                permits: u32::try_from(value).ok()?,
            }),
            _ => script_acquired(status, value, self.fenced.is_some()).map(SharedAcquired::Found),
        }
    }
}
