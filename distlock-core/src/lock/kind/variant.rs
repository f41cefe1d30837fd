//! Which kind a hold is (`Kind`: one variant per kind, its module beside this file) and what
//! a kind's requests are about (`Target`); what each kind does is `impl Kind`, in `kind`.

use crate::client::Client;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;

/// What one acquisition takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The lock: one holder at a time (`exclusive`).
    Exclusive,
    /// One permit of a semaphore of this many (`permits`).
    Permits(u32),
    /// A shared (read) hold of the lock (`shared`).
    Read,
    /// Several locks, all or none (`set`): exclusive, each of them.
    Set,
}

/// What a kind's requests are about: the client, every lock of the hold in its order (one,
/// or a set's, at least one) and the holder's value.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) client: &'a Client,
    pub(crate) keys: &'a [LockKeys],
    pub(crate) value: &'a ShortId,
}

impl<'a> Target<'a> {
    /// The hold's first lock: the one lock a request of one lock is about.
    pub(crate) fn key(&self) -> &'a LockKeys {
        &self.keys[0]
    }
}

/// What one attempt at a hold of any kind found.
pub(crate) enum Found {
    /// Taken: the fencing tokens when fenced (the lock's; a set's, one per lock in the set's
    /// order) and, when replicas were asked for, the fewest that acknowledged a call and what
    /// the `WAIT` required.
    Taken {
        tokens: Vec<u64>,
        acked: Option<(usize, usize)>,
    },
    /// Not taken: lock `at` (its index in a set; 0 for one lock) is held by another (for
    /// `pttl` ms; over RedLock `pass`: release wakes to let pass, the waiters queued ahead
    /// take those turns), or is not a hold this kind can share (`incompatible`); `partial`:
    /// this attempt took an earlier slot group of a set.
    NotTaken {
        at: usize,
        pttl: Option<i64>,
        pass: u32,
        incompatible: bool,
        partial: bool,
    },
}
