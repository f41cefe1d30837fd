//! Cohorts: the waiters of one client for one lock (a plain lock's waiters to whom a release
//! may hand it, see `lock::wait_loop`, "Handoff") that wait in the client behind one of them
//! queued in Redis, and the client's own release of the lock that queues the next of them.
//!
//! Every handed waiter must be in the lock's queue in Redis by the time its turn comes, so that
//! the waiters of every client take their turns in arrival order (their tickets). A waiter of a
//! client that already has a waiter of the lock queued in Redis (or waiting here) need not send
//! an attempt of its own to get there: it waits here, and the next release of the lock by this
//! client carries its value and ticket (`RELEASE`'s next waiter), so the release queues it
//! (with its own ticket: its place among other clients' waiters is the one it came for) and
//! hands the lock to the first waiter, which may be this one. Under contention among a client's
//! tasks a handoff then costs Redis one script, the release, instead of two (the release and the
//! next waiter's queuing attempt).
//!
//! Nothing here decides who holds the lock: the lock key alone does, and a waiter trusts a grant
//! only for its window from the moment its queuing was sent (for a carried waiter, when the
//! release that carries it was taken out of the cohort, before it was sent). What can go wrong
//! is only that a waiter here is not queued in Redis when it should be:
//! * the release that carried it failed (its answer is an error): the waiter is promoted, and
//!   queues itself with an attempt of its own;
//! * the last waiter of the cohort queued in Redis leaves without the lock: the first waiter here
//!   is promoted the same way;
//! * the holder never releases through this client (its guard leaked, its release path sends
//!   no next waiter): a waiter here looks again at least every `HANDED_RECHECK` (1 s), and an
//!   attempt of its own queues it.
//!
//! A waiter that goes away without the lock leaves the queue in Redis like any other
//! (`lock::queue_entry::QueueEntry`), once it is there: one that goes away while the release carrying
//! it is still out leaves it through that release's answer ([`Carry::confirm`]), so its leaving
//! never overtakes its queuing (which would leave an entry that is handed the lock for nobody).
//! A waiter here that looks again on its own (a plain wake, its `HANDED_RECHECK`) sends an
//! attempt that queues it, and may be in Redis from then on, whatever the cohort knows of it
//! ([`Deferral::queuing`]): gone before that attempt's answer, it leaves the queue too (its
//! leaving goes after the attempt on the connection, so it does not overtake it).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{self, mutant, time, Mutex};
use crate::wire::calls::NextWaiter;

/// A release's grant of the lock to a waiter, as its message said it.
pub(crate) struct Grant {
    /// The request id it names: the waiter's attempt, or the release of its client, that last
    /// queued it (`None`: a grant that names none, from a client of an earlier version).
    pub(crate) named: Option<Vec<u8>>,
}

/// Where a release's grant (or a cohort's promotion) reaches its waiter.
#[derive(Default)]
pub(super) struct GrantSlot {
    /// The grant a release made this waiter, until the waiter takes it.
    pub(super) grant: Mutex<Option<Grant>>,
    /// The waiter is to queue itself in Redis now (see the module docs).
    pub(super) promoted: AtomicBool,
    pub(super) notify: Notify,
}

/// One lock's cohort in one client.
pub(super) type Shared = Arc<Mutex<Cohort>>;

#[derive(Default)]
pub(super) struct Cohort {
    /// Waiters of the cohort known to be queued in Redis (by their own attempt or by a release
    /// of this client).
    queued: usize,
    /// Waiters that wait here for a release of this client to queue them, in arrival order.
    deferred: VecDeque<Arc<Deferred>>,
}

/// A waiter that waits in the client.
pub(super) struct Deferred {
    next: NextWaiter,
    slot: Arc<GrantSlot>,
    /// Read and written with the cohort's lock held.
    fate: Mutex<Fate>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Waiting here.
    Waiting,
    /// A release carries it, not answered yet (taken out of the cohort at `at`, in the
    /// client's switch epoch `epoch`): counted in `queued`.
    Carried { at: Instant, epoch: u64 },
    /// The release that carried it was answered: queued in Redis, counted.
    Queued { at: Instant, epoch: u64 },
    /// To queue itself: not counted.
    Promoted,
    /// Its own attempt queued it: counted.
    Own,
    /// It went away while the release carrying it was out: that release's answer takes it out
    /// of the queue again.
    Left,
    /// It took the lock, or went away: accounted for.
    Gone,
}

/// A waiter's membership of its cohort (held by its subscription).
#[derive(Default)]
pub(super) enum Membership {
    /// Not counted: not a handed waiter, or not queued yet.
    #[default]
    Outside,
    /// Queued in Redis by an attempt of its own, never deferred: counted.
    Queued,
    /// Deferred when it came (waiting in the client, carried, promoted, queued by its own
    /// attempt since: see its fate).
    Deferred(Arc<Deferred>),
}

/// Defers a waiter (`next`, whose grant lands in `slot`) if the cohort has a waiter queued in
/// Redis or already waiting here: its place, or `None` (it queues itself).
pub(super) fn defer(
    cohort: &Shared,
    next: NextWaiter,
    slot: &Arc<GrantSlot>,
) -> Option<Membership> {
    let mut c = sync::lock(cohort);
    if c.queued == 0 && c.deferred.is_empty() {
        return None;
    }
    let waiter = Arc::new(Deferred {
        next,
        slot: slot.clone(),
        fate: Mutex::new(Fate::Waiting),
    });
    c.deferred.push_back(waiter.clone());
    Some(Membership::Deferred(waiter))
}

/// How many waiters wait here.
pub(super) fn deferred(cohort: &Shared) -> usize {
    sync::lock(cohort).deferred.len()
}

/// How many waiters of the cohort are counted as queued in Redis (the checks' view).
#[cfg(all(test, shuttle))]
pub(super) fn counted(cohort: &Shared) -> usize {
    sync::lock(cohort).queued
}

/// The waiter at `place` is queued in Redis by an attempt of its own.
pub(super) fn queued(cohort: &Shared, place: &mut Membership) {
    let mut c = sync::lock(cohort);
    match place {
        Membership::Queued => {}
        Membership::Outside => {
            c.queued += 1;
            *place = Membership::Queued;
        }
        // A deferred waiter keeps its `Deferred` (its queue entry consults it when it leaves).
        Membership::Deferred(waiter) => {
            let mut fate = sync::lock(&waiter.fate);
            match *fate {
                Fate::Waiting => {
                    c.deferred.retain(|w| !Arc::ptr_eq(w, waiter));
                    c.queued += 1;
                }
                // Counted already (a release's count passes to it).
                Fate::Carried { .. } | Fate::Queued { .. } | Fate::Own => {}
                Fate::Promoted | Fate::Left | Fate::Gone => c.queued += 1,
            }
            *fate = Fate::Own;
        }
    }
}

/// When the release that carried the waiter at `place` took it out of the cohort, and the
/// switch epoch then, if one did and the waiter has not queued itself since.
pub(super) fn carried(place: &Membership) -> Option<(Instant, u64)> {
    match place {
        Membership::Deferred(waiter) => match *sync::lock(&waiter.fate) {
            Fate::Carried { at, epoch } | Fate::Queued { at, epoch } => Some((at, epoch)),
            _ => None,
        },
        _ => None,
    }
}

/// The waiter at `place` leaves the cohort (its subscription ends): it took the lock (`took`:
/// its release will carry the next), or it went away (the last one queued in Redis promotes
/// the first waiting here).
pub(super) fn leave(cohort: &Shared, place: Membership, took: bool) {
    let mut c = sync::lock(cohort);
    let counted = match place {
        Membership::Outside => false,
        Membership::Queued => true,
        Membership::Deferred(waiter) => account(&mut c, &waiter, took, false).0,
    };
    if counted {
        uncount(&mut c, took);
    }
}

/// `waiter` leaves (`took`: with the lock; `sent`: an attempt of its own that queues it went
/// out): its fate settled, whether it was counted, and whether it is to leave the queue in
/// Redis itself.
fn account(c: &mut Cohort, waiter: &Arc<Deferred>, took: bool, sent: bool) -> (bool, bool) {
    let mut fate = sync::lock(&waiter.fate);
    let was = *fate;
    *fate = match was {
        Fate::Carried { .. } if !took && mutant!(LeaveOvertakesCarry) => Fate::Gone,
        Fate::Carried { .. } if !took => Fate::Left,
        // Still for the release's answer to settle.
        Fate::Left => Fate::Left,
        _ => Fate::Gone,
    };
    match was {
        // Never carried, so in Redis only if an attempt of its own queued it (ordered before
        // this leaving on the connection).
        Fate::Waiting => {
            c.deferred.retain(|w| !Arc::ptr_eq(w, waiter));
            (false, sent && !mutant!(OwnAttemptNotLeft))
        }
        Fate::Carried { .. } => (true, mutant!(LeaveOvertakesCarry)),
        Fate::Queued { .. } | Fate::Own => (true, true),
        Fate::Promoted => (false, true),
        Fate::Left | Fate::Gone => (false, false),
    }
}

/// One counted waiter less (`took`: it took the lock).
fn uncount(c: &mut Cohort, took: bool) {
    c.queued -= 1;
    if c.queued == 0 && !took {
        promote_first(c);
    }
}

/// The first waiter here is to queue itself.
fn promote_first(c: &mut Cohort) {
    if let Some(waiter) = c.deferred.pop_front() {
        promote(&waiter, &mut sync::lock(&waiter.fate));
    }
}

/// `waiter` (its `fate` locked) is to queue itself: told at once.
fn promote(waiter: &Deferred, fate: &mut Fate) {
    *fate = Fate::Promoted;
    waiter.slot.promoted.store(true, Ordering::Release);
    waiter.slot.notify.notify_one();
}

/// A deferred waiter as its queue entry sees it (`lock::queue_entry::QueueEntry`).
pub(crate) struct Deferral {
    cohort: Shared,
    waiter: Arc<Deferred>,
    /// An attempt of the waiter's own that queues it went out (its own knowledge, kept here
    /// rather than in its shared fate: only its own leaving reads it).
    sent: bool,
}

impl Deferral {
    pub(super) fn new(cohort: &Shared, place: &Membership) -> Option<Self> {
        match place {
            Membership::Deferred(waiter) => Some(Deferral {
                cohort: cohort.clone(),
                waiter: waiter.clone(),
                sent: false,
            }),
            _ => None,
        }
    }

    /// The waiter sends an attempt of its own that queues it in Redis (it looks again while
    /// it waits here, or it was promoted): from now on it may be there, though the cohort
    /// learns so only from the attempt's answer (`Interest::queued`): a waiter cancelled
    /// before that answer, or whose attempt failed, leaves the queue when it goes away.
    pub(crate) fn queuing(&mut self) {
        self.sent = true;
    }

    /// The waiter goes away without the lock: true if it is to leave the queue in Redis now
    /// (it is, or may be, there); false if it never got there, or if the release carrying it
    /// is still out (that release's answer takes it out, [`Carry::confirm`]).
    pub(crate) fn leaving(&self) -> bool {
        let mut c = sync::lock(&self.cohort);
        let (counted, leave) = account(&mut c, &self.waiter, false, self.sent);
        if counted {
            uncount(&mut c, false);
        }
        leave
    }
}

/// The first waiter here, for a release of this client to queue (`epoch`: the client's switch
/// epoch now); dropped without [`Carry::confirm`] (the release failed), the waiter queues
/// itself.
pub(super) fn carry_next(cohort: &Shared, epoch: u64) -> Option<Carry> {
    let mut c = sync::lock(cohort);
    let waiter = c.deferred.pop_front()?;
    *sync::lock(&waiter.fate) = Fate::Carried {
        at: time::now(),
        epoch,
    };
    c.queued += 1;
    Some(Carry {
        cohort: cohort.clone(),
        waiter,
        confirmed: false,
    })
}

/// A waiter taken out of its cohort for a release to queue in Redis.
pub(crate) struct Carry {
    cohort: Shared,
    waiter: Arc<Deferred>,
    confirmed: bool,
}

impl Carry {
    /// The waiter, as the release sends it.
    pub(crate) fn waiter(&self) -> NextWaiter {
        self.waiter.next
    }

    /// The release was answered: the waiter is queued in Redis. Returns it if it went away
    /// meanwhile: the caller takes it out of the queue again.
    pub(crate) fn confirm(mut self) -> Option<NextWaiter> {
        self.confirmed = true;
        let _c = sync::lock(&self.cohort);
        let mut fate = sync::lock(&self.waiter.fate);
        match *fate {
            Fate::Carried { at, epoch } => {
                *fate = Fate::Queued { at, epoch };
                None
            }
            Fate::Left => {
                *fate = Fate::Gone;
                Some(self.waiter.next)
            }
            _ => None,
        }
    }
}

impl Carry {
    /// The release failed: it may not have queued the waiter, or it may have without its
    /// answer coming back. A waiter still here queues itself (it is promoted); one that went
    /// away meanwhile is returned, as it may be in the queue (that release applied, or an
    /// attempt of its own queued it): the caller takes it out.
    pub(crate) fn failed(mut self) -> Option<NextWaiter> {
        self.confirmed = true;
        self.unconfirmed()
            .filter(|_| !mutant!(FailedCarryLeftBehind))
    }

    fn unconfirmed(&self) -> Option<NextWaiter> {
        let mut c = sync::lock(&self.cohort);
        let mut fate = sync::lock(&self.waiter.fate);
        match *fate {
            // Unless it queued itself or left meanwhile, the waiter queues itself now.
            Fate::Carried { .. } if mutant!(NoPromotionOnFailedCarry) => c.queued -= 1,
            Fate::Carried { .. } => {
                promote(&self.waiter, &mut fate);
                c.queued -= 1;
            }
            Fate::Left => {
                *fate = Fate::Gone;
                return Some(self.waiter.next);
            }
            _ => {}
        }
        None
    }
}

impl Drop for Carry {
    /// Dropped unanswered (the release's future went away): as [`Carry::failed`], except that
    /// a waiter gone meanwhile is left to its entry's lapse (nothing here can send its leaving).
    fn drop(&mut self) {
        if !self.confirmed {
            self.unconfirmed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ids::ShortId;

    fn next(n: u64) -> NextWaiter {
        NextWaiter {
            value: ShortId::with_counter("d2:test", b':', n),
            ticket: n,
            id: ShortId::with_counter("", b'r', n),
            until: None,
        }
    }

    /// A cohort with one waiter queued in Redis by its own attempt (`first`), and `n` deferred
    /// behind it (their places and grant slots).
    fn cohort(n: u64) -> (Shared, Membership, Vec<(Membership, Arc<GrantSlot>)>) {
        let cohort = Shared::default();
        let slot = Arc::new(GrantSlot::default());
        assert!(
            defer(&cohort, next(0), &slot).is_none(),
            "nobody to wait behind"
        );
        let mut first = Membership::Outside;
        queued(&cohort, &mut first);
        let waiters = (1..=n)
            .map(|i| {
                let slot = Arc::new(GrantSlot::default());
                let place = defer(&cohort, next(i), &slot).expect("deferred");
                (place, slot)
            })
            .collect();
        (cohort, first, waiters)
    }

    fn counted(cohort: &Shared) -> usize {
        sync::lock(cohort).queued
    }

    #[test]
    fn releases_carry_the_deferred_in_arrival_order() {
        let (cohort, first, waiters) = cohort(2);
        assert_eq!(deferred(&cohort), 2);
        // The first took the lock: nobody is promoted; its release carries the next.
        leave(&cohort, first, true);
        assert_eq!(counted(&cohort), 0);
        let carry = carry_next(&cohort, 7).expect("one to carry");
        assert_eq!(carry.waiter().ticket, 1);
        assert_eq!(counted(&cohort), 1);
        assert!(carried(&waiters[0].0).is_some_and(|(_, epoch)| epoch == 7));
        assert!(carry.confirm().is_none());
        assert!(
            carried(&waiters[0].0).is_some(),
            "queued: the grant trusts it"
        );
        assert_eq!(deferred(&cohort), 1);
        assert!(!waiters[1].1.promoted.load(Ordering::Acquire));
    }

    #[test]
    fn a_failed_release_promotes_the_waiter_it_carried() {
        let (cohort, first, waiters) = cohort(1);
        leave(&cohort, first, true);
        drop(carry_next(&cohort, 0).expect("one to carry"));
        assert!(waiters[0].1.promoted.load(Ordering::Acquire));
        assert_eq!(counted(&cohort), 0);
        assert!(
            carried(&waiters[0].0).is_none(),
            "nothing to trust a grant from"
        );
    }

    #[test]
    fn the_last_queued_waiter_leaving_without_the_lock_promotes_the_first_deferred() {
        let (cohort, first, waiters) = cohort(2);
        leave(&cohort, first, false);
        assert!(waiters[0].1.promoted.load(Ordering::Acquire));
        assert!(!waiters[1].1.promoted.load(Ordering::Acquire));
        assert_eq!(deferred(&cohort), 1);
        assert!(carry_next(&cohort, 0).is_some_and(|c| c.waiter().ticket == 2));
    }

    #[test]
    fn a_waiter_that_leaves_while_its_release_is_out_leaves_after_its_answer() {
        let (cohort, first, mut waiters) = cohort(1);
        leave(&cohort, first, true);
        let carry = carry_next(&cohort, 0).expect("one to carry");
        let (place, _) = waiters.remove(0);
        let deferral = Deferral::new(&cohort, &place).expect("deferred");
        assert!(
            !deferral.leaving(),
            "not its to leave: the release is still out"
        );
        leave(&cohort, place, false);
        assert_eq!(counted(&cohort), 0);
        let gone = carry.confirm().expect("the answer takes it out");
        assert_eq!(gone.ticket, 1);
    }

    #[test]
    fn a_waiter_leaving_from_the_client_is_never_carried() {
        let (cohort, _first, mut waiters) = cohort(1);
        let (place, _) = waiters.remove(0);
        let deferral = Deferral::new(&cohort, &place).expect("deferred");
        assert!(
            !deferral.leaving(),
            "never queued in Redis: nothing to leave"
        );
        leave(&cohort, place, false);
        assert!(carry_next(&cohort, 0).is_none());
        assert_eq!(counted(&cohort), 1, "the first is still queued");
    }

    #[test]
    fn a_waiter_gone_while_its_own_attempt_is_out_leaves_the_queue() {
        let (cohort, _first, mut waiters) = cohort(1);
        let (place, _) = waiters.remove(0);
        let mut deferral = Deferral::new(&cohort, &place).expect("deferred");
        // It looks again on its own; the answer of that attempt never comes.
        deferral.queuing();
        assert!(
            deferral.leaving(),
            "its own attempt may have queued it: it leaves"
        );
        leave(&cohort, place, false);
        assert_eq!(deferred(&cohort), 0);
        assert!(carry_next(&cohort, 0).is_none(), "not carried once gone");
        assert_eq!(counted(&cohort), 1, "the first is still queued");
    }

    #[test]
    fn a_deferred_waiter_queued_by_its_own_attempt_counts_once() {
        let (cohort, first, mut waiters) = cohort(1);
        leave(&cohort, first, true);
        let (mut place, _) = waiters.remove(0);
        let carry = carry_next(&cohort, 0).expect("one to carry");
        queued(&cohort, &mut place);
        queued(&cohort, &mut place);
        assert_eq!(counted(&cohort), 1);
        assert!(carry.confirm().is_none());
        let deferral = Deferral::new(&cohort, &place).expect("deferred");
        assert!(deferral.leaving(), "in Redis by its own attempt: it leaves");
        leave(&cohort, place, false);
        assert_eq!(counted(&cohort), 0);
    }
}
