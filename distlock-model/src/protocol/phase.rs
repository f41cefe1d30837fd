//! What a modelled client is doing (`Phase`), where it stands in a re-entry (`Entered`) and
//! what a request in flight was (`Req`): the states the client's steps
//! (`client`), the scripts' effects (`apply`) and the liveness property (`liveness`) read; a
//! file of its own so that none of them imports another's states back.

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between acquisitions.
    Idle,
    /// Acquiring.
    Waiting {
        /// When the acquire started (its ticket's time).
        started: i64,
        /// When it attempts next (`None`: only a message wakes it).
        next_at: Option<i64>,
        /// Subscribed and queued in Redis (after its first attempt found the lock held).
        queued: bool,
        /// The last queued attempt that found the lock held: its request, its send and when
        /// its reply came (the look the next must follow within the recheck).
        last_busy: Option<(u8, i64, i64)>,
    },
    /// Holding (believed while `now < until`).
    Holding {
        /// Believed until here.
        until: i64,
        /// Its fencing token (0: none).
        token: i64,
        /// When the watchdog renews next.
        renew_at: Option<i64>,
        /// When it lets go.
        release_at: i64,
        /// Its fenced write is done.
        written: bool,
        /// Its term is proclaimed (a leader).
        proclaimed: bool,
        /// Its re-entry ([`Setup::reentry`](super::Setup::reentry)): not yet, inside, or exited.
        entered: Entered,
    },
    /// Its release is in flight; believed until `until` only under the bug that ends belief
    /// after the release.
    Releasing {
        /// Believed until here (the bug), or not at all.
        until: Option<i64>,
    },
    /// Every acquisition done.
    Done,
}

/// Where a holder is in its one re-entry (a body taking the lock it holds: `lock/reenter.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Entered {
    /// Not re-entered (yet).
    Not,
    /// The inner hold is held too: two holds counted.
    Inside,
    /// The inner hold exited: one hold counted.
    Exited,
}

/// What a request in flight was.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Req {
    /// An acquire attempt (queued or not).
    Attempt {
        /// A queued attempt (`ACQUIRE_HANDED`).
        queued: bool,
    },
    /// A renewal.
    Renew,
    /// A re-entry's check that the hold is still its own (`RENEW`).
    Reenter,
    /// A release (or a resign).
    Release,
    /// A leader's proclaim.
    Proclaim,
    /// Leaving the queue.
    Leave,
}
