//! The waiters' queue, the client's side: a waiting acquire's ticket and place (its place in
//! the queue kept next to the lock, see `scripts::ACQUIRE_QUEUED` and `ACQUIRE_HANDED`; the
//! entry it takes out again when it leaves is `lock::queue_entry`'s).
//!
//! Over a RedLock quorum a release wakes the waiters of every client at once. Each master
//! grants a free lock only to the caller with the lowest ticket it has queued, and the ticket
//! is the same on every master (the caller's clock when its acquire started), so the masters
//! agree on whose turn it is: the waiters no longer split them, and a client that releases
//! and asks again at once queues behind the waiters instead of taking the lock back before
//! their wake-ups arrive. Tickets from hosts whose clocks disagree are ordered by those clocks
//! (a host ahead by a second queues behind waiters that came up to a second later).
//!
//! On one server, Sentinel and a cluster the queue serves the waiters of a lock and of a
//! semaphore's permits, of every client, and the release itself hands the lock (or the permit
//! it frees) to the first of them (see `lock::wait_loop`, "Handoff"): the same tickets order
//! them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::wire::calls::Turn;
use crate::wire::scripts;
use crate::wire::scripts::entry_life;

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
    /// When the waiter's own wait ends (`None`: it does not wait): its entry in the queue
    /// lapses then at the latest, even if its process is gone (see `scripts::entry_life`).
    pub(crate) until: Option<Instant>,
}

impl Place {
    /// The place of a waiter to whom a release may hand the hold (one server, Sentinel, a
    /// cluster: a lock's or a permit's), for its grant `window`, from now; `confirm`: it
    /// confirms a grant with one more attempt.
    pub(crate) fn handed(window: Duration, confirm: bool) -> Place {
        Place {
            ticket: handed_ticket(window),
            queue: false,
            window: Some(window),
            confirm,
            until: None,
        }
    }

    /// How long this attempt's queue entry lives in Redis unless a later attempt renews it
    /// (`scripts::entry_life`).
    pub(crate) fn life(&self) -> u64 {
        entry_life(self.until)
    }

    /// This attempt's turn in the queue a release hands the hold over from (`sharded`: its
    /// release channel is a cluster's): `Some` for a queued attempt of a handed waiter.
    pub(crate) fn turn(self, sharded: bool) -> Option<Turn> {
        (self.queue && self.window.is_some()).then_some(Turn {
            ticket: self.ticket,
            sharded,
            life: self.life(),
        })
    }
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
