//! The one acquire/wait loop, for every kind of hold (a `Waiter`): attempts (the kind's) until
//! taken, busy or failed; a busy hold waits for its release (or its holder's ttl), subscribed
//! to the lock the attempt found busy (a set's, whichever of its locks that was); a transient
//! failure pauses (`backoff`) and tries again within the wait; what an attempt may have taken
//! is released if the acquire gives up or is dropped (and, for a set or over RedLock, what an
//! attempt that did not take the whole hold took, before waiting: `Kind::releases_untaken`).
//!
//! ## Handoff
//!
//! On one server, Sentinel and a cluster, a plain lock's waiter (not a fenced one, nor one that
//! asks for replicas) is queued in Redis and handed the lock by the release itself: the release
//! script sets the lock to the first waiter's value and names it (and the request that queued
//! it) in its message
//! (`scripts::RELEASE`, `grant_prelude!`), so the next holder starts after one message, not a
//! message and a round trip, and the waiters of every client and process take their turns in
//! the order they came (their tickets, `client::waiting::queue::handed_ticket`). A waiter whose client already
//! has a waiter of the lock queued in Redis (or waiting so) sends no attempt of its own: it
//! waits in the client, and the client's next release of the lock queues it with its own ticket
//! (`client::waiting::cohort`), so a handoff between a client's tasks costs Redis one script, not two.
//!
//! * **The lease of a lock handed over.** The grant names the request that last queued the
//!   waiter (its attempt that found the lock held, or the release of its client that carried
//!   it: `queue:ids`), so the waiter knows the grant came after that request was applied, so
//!   after it was sent; the release set the lock for the waiter's grant window
//!   (`scripts::grant_window`: 1 s, or the ttl if shorter). So the lock is the waiter's for the
//!   window from that request's send, minus the usual margin. A grant that names another
//!   request (one that reached the waiter after a later attempt of its own found the lock
//!   another's: the messages and the replies travel on two connections) proves nothing about
//!   the lock now, and the waiter asks again at once; if less than half of that is left when the grant is heard (the waiter waited
//!   long since its last attempt), it does not trust the grant and asks again: the lock is
//!   found ours and extended to the ttl, one round trip. A trusted grant's lease is extended to
//!   the ttl by the watchdog a third of the way through what is left (`into_guard`), and
//!   without `renew` no further; a short body lets go before that and costs nothing more.
//! * **Waiters that went away.** A waiter that gives up, fails or is dropped leaves the queue
//!   and, if it was handed the lock meanwhile, lets it go again (`lock::queue_entry::QueueEntry`). One
//!   whose process died is handed the lock for its window at most, never its ttl; since nobody
//!   publishes when that window lapses, a handed waiter looks again at least every
//!   `HANDED_RECHECK` (1 s), and a lock found free with an earlier waiter queued is handed to
//!   that one by the finder (`scripts::ACQUIRE_HANDED`). Every attempt sends the life of its
//!   queue entry (`scripts::entry_life`: until the wait ends, `ENTRY_LAPSE`, 3 s, at most), so
//!   the entries of a process that died lapse by themselves and one whose wait ended is never
//!   handed the lock; and the finder of a lock free while the record of its last grant is
//!   still there takes that grantee's client for gone and its other entries out of the queue
//!   (`grant_prelude!`'s `sweep`): a killed process's waiters cost one window in all.
//! * **Fenced waiters and waiters that ask for replicas** are queued and handed the lock the
//!   same way, but do not trust the grant: their next attempt (sent at once) finds the lock
//!   their own and confirms it, raising its fencing token while it is theirs and writing its
//!   expiry so that the `WAIT` for their replicas covers the grant (`scripts::ACQUIRE_HANDED`):
//!   one more round trip per handoff, in their turn.
//! * **Permits** take their turns the same way (`Kind::place`): a semaphore's waiter queues
//!   in Redis, a release hands the permit it frees to the first waiter (a holder for its grant
//!   window: `scripts::ACQUIRE_PERMIT`), and the waiter trusts the grant as a lock's does (or,
//!   fenced or asking for replicas, confirms it with one more attempt). A permit's release
//!   carries no waiter of its client (no cohort): each waiter queues itself.
//! * **Sets** (where the whole set is one call: `set::place`) queue at the lock they find
//!   held, are handed it by its release, and always confirm: the next attempt takes the whole
//!   set, or gives that lock back and queues at the lock now held (`scripts::ACQUIRE_ALL`).
//! * **Readers and writers** wait in one line (`scripts::ACQUIRE_READ`, `ACQUIRE_HANDED`): a
//!   writer's release hands the lock to the first waiter, and if that is a reader to every
//!   reader at the head of the line together (a share each, for its window); the last reader's
//!   release hands it to a writer queued behind; a reader never enters past a writer queued
//!   before it, and a writer queued behind readers waits there (not asked as a write that
//!   marks its intent, as a writer that does not wait is).
//! * **Who still wakes and retries.** Sets over several hash slot groups and every waiter over
//!   RedLock keep the wake-and-retry path; they take a lock that is let go with nobody
//!   queued, so behind handed waiters they wait for the queue to empty. A set's attempt marks
//!   the lock it finds held (`scripts::ACQUIRE_ALL`), so that lock's release wakes it: a release
//!   of a lock nobody marked publishes nothing (`marks_prelude!`); over RedLock every release
//!   publishes.

use std::ops::Range;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::waiting::queue::Place;
use crate::client::waiting::Subscription;
use crate::client::Client;
use crate::error::Error;
use crate::lease::{deadline_after, guaranteed_until, millis_ceil};
use crate::lock::attempt::{into_guard, unreplicated};
use crate::lock::backoff::Backoff;
use crate::lock::guard::LockGuard;
use crate::lock::hold::{Hold, ReleaseOnDrop};
use crate::lock::kind::{Found, Kind, OneOrMany};
use crate::lock::queue_entry::QueueEntry;
use crate::lock::reenter::{self, reenter};
use crate::lock::terms::Terms;
use crate::metrics::{self, Labels, Waiting};
use crate::wire::calls::NextWaiter;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;

/// How often a waiter looks again at a lock whose key has no expiry (someone created it by
/// hand): such a holder never publishes a release and has no ttl to wait out.
const NO_EXPIRY_RECHECK: Duration = Duration::from_secs(1);

/// The longest a waiter to whom a release may hand the lock waits between two attempts.
const HANDED_RECHECK: Duration = Duration::from_secs(1);

/// Acquires a hold of `kind` of the locks `keys` (one lock, permit or read hold, or a set's
/// locks in their order), or re-enters it.
pub(crate) async fn acquire(
    client: Client,
    keys: OneOrMany<LockKeys>,
    kind: Kind,
    terms: Terms,
) -> Result<LockGuard, Error> {
    let started = Instant::now();
    if let Some(outer) = reenter::outer(&client, &keys)? {
        return reenter(outer, kind, &terms, started).await;
    }
    let owner = client.new_owner();
    let hold = Hold::new(client, keys, owner, kind);
    let mut waiter = Waiter::new(hold, terms, started);
    waiter.run().await
}

/// One acquire of a hold of any kind, from its first attempt until it is taken, busy or
/// failed. (Fields drop in order: its queue entry leaves before its subscription goes.)
struct Waiter {
    /// A waiter queued in Redis, or on the RedLock masters, since its first queuing attempt
    /// (an acquire that takes the hold at once never queues), taken out again when it ends.
    queued: Option<QueueEntry>,
    /// Armed while an attempt may have taken something not yet ours to keep: a later attempt
    /// (same value) reads such a take as its own; giving up, or being dropped, releases it in
    /// the background (owner-checked: another owner's lock is left alone). From the first
    /// attempt that failed transiently on one server until the hold is taken (`stale`), and
    /// while the kind may hold a part of itself (`Kind::may_hold_part`).
    pending: Option<ReleaseOnDrop>,
    /// An attempt failed transiently: what it sent may still take the hold.
    stale: bool,
    /// The last attempt's transient failure (a reset or timed-out connection, `NoQuorum`, a
    /// server loading or failing over), if it failed so: what the waiter is told when its wait
    /// runs out, and the reason to pause (`backoff`) instead of waiting for a release.
    failed: Option<Error>,
    backoff: Backoff,
    waiting: Waiting,
    /// The lock waited for (its index in a set: the one the last attempt found busy) and its
    /// release notifications.
    subscription: Option<(usize, Subscription)>,
    hold: Hold,
    terms: Terms,
    started: Instant,
    give_up: Option<Instant>,
    /// The calls an attempt goes in (`Kind::groups`: a set's slot groups; one for one lock).
    groups: OneOrMany<Range<usize>>,
    /// The waiter's place in the waiters' queue (its ticket; its grant window while a release
    /// may hand it the lock: see the module docs, "Handoff").
    place: Place,
    /// Skip the next attempt: the waiter waits in the client behind one of its waiters
    /// already queued in Redis (`client::waiting::cohort`), or tasks of this client already wait for
    /// the lock (queue behind them instead of barging).
    queue_first: bool,
    /// The last queued attempt that found the lock held: a grant naming it came after it.
    last_busy: Option<Queued>,
    /// The id a release of this client that carries the waiter (`client::waiting::cohort`)
    /// gives it: a grant naming it came after that release was made.
    carry_id: Option<ShortId>,
    /// A write that met readers (what a `Busy` reports): unless it waits in its turn (then it
    /// queues behind them), this and every later attempt goes as `ACQUIRE_WRITE`.
    met_readers: bool,
}

/// A queued attempt that found the lock held: when it was sent, the epoch then, and its
/// request id (what a grant names).
struct Queued {
    sent: Instant,
    epoch: u64,
    id: ShortId,
}

/// Where the waiter stands after an attempt that did not take the hold: lock `at` busy (for
/// `pttl` ms; `pass`: RedLock wakes to let pass).
struct Busy {
    at: usize,
    pttl: Option<i64>,
    pass: u32,
}

impl Waiter {
    fn new(hold: Hold, terms: Terms, started: Instant) -> Self {
        let client = &hold.client;
        let give_up = terms.wait.map(|w| deadline_after(started, w));
        let queue_first = give_up.is_some() && client.has_waiters(hold.key().channel());
        let groups = hold.kind.groups(client, hold.keys());
        let place = Place {
            until: give_up,
            ..hold
                .kind
                .place(client, &terms, give_up.is_some(), groups.len())
        };
        Waiter {
            queued: None,
            pending: None,
            stale: false,
            failed: None,
            backoff: Backoff::default(),
            waiting: Waiting::default(),
            subscription: None,
            hold,
            terms,
            started,
            give_up,
            groups,
            place,
            queue_first,
            last_busy: None,
            carry_id: None,
            met_readers: false,
        }
    }

    /// The loop: attempt, give up, pause after a failure, or wait for a turn.
    async fn run(&mut self) -> Result<LockGuard, Error> {
        loop {
            let busy = match std::mem::take(&mut self.queue_first) {
                true => self.still_busy(),
                false => match self.attempt().await? {
                    Ok(guard) => return Ok(guard),
                    Err(busy) => busy,
                },
            };
            let now = Instant::now();
            let Some(give_up) = self.give_up.filter(|&g| now < g) else {
                return Err(match self.failed.take() {
                    Some(error) => error,
                    None => self.busy(busy.at),
                });
            };
            if let Some(error) = &self.failed {
                pause(&mut self.backoff, error, self.terms.label, now, give_up).await;
                continue;
            }
            self.backoff.reset();
            if let Some(guard) = self.wait_turn(busy, now, give_up).await? {
                return Ok(guard);
            }
        }
    }

    /// One attempt (the kind's), and what it leaves: the guard, or where the waiter stands.
    async fn attempt(&mut self) -> Result<Result<LockGuard, Busy>, Error> {
        if let Some((_, sub)) = self.subscription.as_mut() {
            sub.mark_seen();
        }
        // Armed while the request may have been applied: cancelled or failed here, what it
        // took is released in the background.
        let mut pending = self
            .pending
            .take()
            .unwrap_or_else(|| ReleaseOnDrop::new(self.hold.clone()));
        let place = self.place_now();
        let id = self.hold.client.new_request_id();
        let sent_at = Instant::now();
        let switches = self.hold.client.switches();
        let (hold, terms) = (&self.hold, &self.terms);
        let attempt = hold.kind.attempt(
            hold.target(),
            terms,
            (place, id),
            &self.groups,
            &mut self.met_readers,
        );
        let sent = Queued {
            sent: sent_at,
            epoch: switches,
            id,
        };
        let found = match attempt.await {
            // A waiter tries again, after a pause, until its wait runs out. (RedLock's
            // `NoQuorum` included: a split vote, masters that did not answer.)
            Err(error) if self.give_up.is_some() && error.is_transient() => {
                self.failed = Some(error);
                self.stale = true;
                None
            }
            Err(error) => return Err(error),
            Ok(found) => {
                self.failed = None;
                Some(found)
            }
        };
        match found {
            Some(Found::Taken { tokens, acked }) => {
                let token = self.tokens(tokens, sent_at).await?;
                pending.disarm();
                if let Some((n, required)) = acked.filter(|(n, required)| n < required) {
                    return Err(unreplicated(self.hold.clone(), n, required).await);
                }
                let guard = self.taken(token, (sent.sent, sent.epoch), None);
                Ok(Ok(guard))
            }
            Some(Found::NotTaken {
                at,
                pttl,
                pass,
                incompatible,
                partial,
            }) => {
                self.not_taken(pending, partial, sent, !incompatible).await;
                if incompatible {
                    return Err(Error::Incompatible {
                        key: self.hold.keys()[at].name().to_owned(),
                    });
                }
                Ok(Err(Busy { at, pttl, pass }))
            }
            None => {
                self.not_taken(pending, false, sent, false).await;
                Ok(Err(self.still_busy()))
            }
        }
    }

    /// Where a waiter stands when no answer says more: busy at the lock it waits for (a
    /// set's: the one it subscribed to), its pttl unknown.
    fn still_busy(&self) -> Busy {
        Busy {
            at: self.subscription.as_ref().map_or(0, |(at, _)| *at),
            pttl: None,
            pass: 0,
        }
    }

    /// The place of the next attempt: a waiter queues from its first attempt after
    /// subscribing, and its queue entry is made (or, for one that waited in the client, told)
    /// before that attempt.
    fn place_now(&mut self) -> Place {
        let queue = self.place.ticket > 0 && self.subscription.is_some();
        if queue {
            let handed = self.place.window.is_some();
            self.queued
                .get_or_insert_with(|| queue_entry(&self.hold, handed))
                .queuing();
        }
        Place {
            queue,
            ..self.place
        }
    }

    /// A take's fencing tokens, over RedLock each raised above every earlier holder's
    /// (failing, the hold is released as the acquire's cleanup drops); the first is the
    /// guard's, a set's are kept with its hold.
    async fn tokens(&self, mut tokens: Vec<u64>, sent_at: Instant) -> Result<Option<u64>, Error> {
        let (client, ttl) = (&self.hold.client, self.terms.ttl);
        // The deployment decides: over RedLock rounds over the masters' floors, elsewhere the
        // acquire's own token.
        for (token, keys) in tokens.iter_mut().zip(self.hold.keys()) {
            *token = client.fence_token(keys, *token, ttl, sent_at).await?;
        }
        Ok(self.hold.record_tokens(tokens))
    }

    /// The hold is taken (by an attempt, or handed over by a release for `granted`): its guard.
    fn taken(
        &mut self,
        token: Option<u64>,
        sent: (Instant, u64),
        granted: Option<Duration>,
    ) -> LockGuard {
        // The guard owns the hold now: the cleanup armed after an attempt that failed would
        // otherwise release the lock the guard holds when the waiter goes (reliability row 19).
        if let Some(mut pending) = self.pending.take() {
            pending.disarm();
        }
        if let Some(entry) = self.queued.as_mut() {
            entry.took();
        }
        if let Some((_, sub)) = self.subscription.as_mut() {
            sub.took();
        }
        self.waiting.acquired(self.started);
        into_guard(
            self.hold.clone(),
            token,
            false,
            &self.terms,
            sent,
            self.started,
            granted,
        )
    }

    /// After an attempt that did not take the hold (`busy`: it found it held, answered):
    /// what it may have taken released where the kind says so, the waiter's queue state, and
    /// its cleanup kept armed (`pending`) while something may still be held.
    async fn not_taken(
        &mut self,
        mut pending: ReleaseOnDrop,
        partial: bool,
        sent: Queued,
        busy: bool,
    ) {
        let (kind, quorum) = (self.hold.kind, self.hold.client.counts_majority());
        let mut held = self.stale && !quorum || kind.may_hold_part(quorum, self.groups.len());
        if kind.releases_untaken(quorum, partial, self.failed.is_some()) {
            held |= !release_untaken(&self.hold).await;
        }
        let queued = self.place.ticket > 0 && self.subscription.is_some();
        if queued && self.place.window.is_some() && self.failed.is_none() && busy {
            self.last_busy = Some(sent);
            if let Some((_, sub)) = self.subscription.as_mut() {
                sub.queued();
            }
        }
        if held {
            self.pending = Some(pending);
        } else {
            pending.disarm();
        }
    }

    /// Waits for the next turn at lock `at` of the hold, subscribing first (again, if the
    /// busy lock changed); a lock a release handed over is taken here.
    async fn wait_turn(
        &mut self,
        busy: Busy,
        now: Instant,
        give_up: Instant,
    ) -> Result<Option<LockGuard>, Error> {
        let Some((_, sub)) = self
            .subscription
            .as_mut()
            .filter(|(held_at, _)| *held_at == busy.at)
        else {
            self.subscribe(busy.at, give_up).await?;
            return Ok(None);
        };
        // A holder that crashed never publishes: look again when its lease runs out (a key
        // without expiry, -1, has no lease to wait out).
        let recheck = match busy.pttl.and_then(|ms| u64::try_from(ms).ok()) {
            Some(ms) => deadline_after(now, Duration::from_millis(ms.max(1))),
            None => now + NO_EXPIRY_RECHECK,
        };
        let Some(window) = self.place.window else {
            sub.wait_until(recheck.min(give_up), busy.pass).await;
            return Ok(None);
        };
        // Also at least every `HANDED_RECHECK`: a lock handed to a waiter that went away is
        // free again after its window, and nobody publishes that.
        let recheck = recheck.min(now + HANDED_RECHECK).min(give_up);
        let Some(grant) = sub.wait_grant(recheck).await else {
            return Ok(None);
        };
        if self.place.confirm {
            // A confirming waiter's next attempt, at once, finds a lock handed to it its own
            // and confirms it (its token, its replicas).
            return Ok(None);
        }
        // The grant came after the request it names: the waiter's last queued attempt, or the
        // release of this client that carried it. A grant naming neither (one that reached
        // the waiter after a later attempt of its own found the lock another's, or from a
        // client of an earlier version) proves nothing now: the next attempt, at once, finds
        // out whether the lock is the waiter's.
        let named = grant.named.as_deref();
        let queued = match (&self.last_busy, self.carry_id) {
            (Some(last), _) if named == Some(last.id.as_bytes()) => Some((last.sent, last.epoch)),
            (_, Some(carry)) if named == Some(carry.as_bytes()) => sub.carried(),
            _ => None,
        };
        Ok(self.granted(queued, window))
    }

    /// Subscribes to the release notifications of lock `at` (a set's busy lock may change
    /// between attempts) and takes the first turn: queued to be handed the lock (in Redis by
    /// an attempt of its own, or behind one of this client's waiters already queued, by this
    /// client's next release of the lock: its cohort), or in the client's FIFO of turns.
    async fn subscribe(&mut self, at: usize, give_up: Instant) -> Result<(), Error> {
        self.subscription = None;
        let keys = &self.hold.keys()[at];
        let sub = match self
            .hold
            .client
            .subscribe(keys.channel(), keys.name())
            .await
        {
            Ok(sub) => sub,
            Err(error) if error.is_transient() => {
                let now = Instant::now();
                pause(&mut self.backoff, &error, self.terms.label, now, give_up).await;
                self.failed = Some(error);
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        let (_, sub) = self.subscription.insert((at, sub));
        self.waiting.start(self.terms.label);
        if self.place.window.is_none() {
            if !sub.take_turn(give_up).await {
                return Err(self.busy(at));
            }
            return Ok(());
        }
        sub.expect_grant(self.hold.value.as_bytes());
        if !self.hold.kind.carries_waiters(&self.hold.client) {
            // A permit's releases carry no waiter: each waiter queues itself.
            return Ok(());
        }
        let carry_id = *self
            .carry_id
            .get_or_insert_with(|| self.hold.client.new_request_id());
        let next = NextWaiter {
            value: self.hold.value,
            ticket: self.place.ticket,
            id: carry_id,
            until: self.give_up,
        };
        if sub.defer(next) {
            // Leaves the queue in Redis too if it goes away once a release queued it there.
            let deferral = sub.deferral();
            self.queued
                .get_or_insert_with(|| queue_entry(&self.hold, true).deferred(deferral));
            self.queue_first = true;
        }
        Ok(())
    }

    /// The guard of a lock a release handed to this waiter: ours for the grant `window` from
    /// the send of the request the grant names (`queued`, when it was sent and the epoch then:
    /// the grant came after it was applied, so after it was sent, and lasts the window from
    /// then), if at least half of that is left (otherwise, or without `queued`, `None`: the
    /// next attempt finds the lock ours and extends it to the ttl, one round trip).
    fn granted(&mut self, queued: Option<(Instant, u64)>, window: Duration) -> Option<LockGuard> {
        let (sent_at, switches) = queued?;
        let left = guaranteed_until(sent_at, window).saturating_duration_since(Instant::now());
        if left < window / 2 {
            tracing::debug!(
                left_ms = millis_ceil(left),
                "lock handed over too late in its window to trust; asking again"
            );
            return None;
        }
        tracing::trace!("lock handed over by the release");
        Some(self.taken(None, (sent_at, switches), Some(window)))
    }

    /// [`Error::Busy`] for lock `at` of the hold, found busy when the wait ran out (or
    /// without one).
    fn busy(&self, at: usize) -> Error {
        // Without `wait` the caller did not wait, whatever the round trip took.
        let waited = match self.terms.wait {
            Some(_) => self.started.elapsed(),
            None => Duration::ZERO,
        };
        tracing::debug!(waited_ms = millis_ceil(waited), "busy");
        Error::Busy {
            key: self.hold.keys()[at].name().to_owned(),
            waited,
            held_by: self.hold.kind.held_by(self.met_readers),
        }
    }
}

/// The waiter's entry in the queue of its hold's lock, or of one of its set's locks at a time
/// (`handed`: a release may hand it the lock).
fn queue_entry(hold: &Hold, handed: bool) -> QueueEntry {
    let keys = hold.keys().to_vec();
    QueueEntry::new(hold.client.clone(), keys, hold.value, handed)
}

/// Releases what an attempt that did not take the hold may have taken (owner-checked:
/// another owner's lock is left alone): true if released; a failure is left to the acquire's
/// cleanup (the release on drop) and to the next attempt (which finds its own take as a
/// replay).
async fn release_untaken(hold: &Hold) -> bool {
    match hold.release(None).await {
        Ok(_) => {
            tracing::debug!(key = %hold.key().name(), "released what an attempt that did not take the hold took, before waiting");
            true
        }
        Err(error) => {
            tracing::debug!(key = %hold.key().name(), %error, "release after an attempt that did not take the hold failed; retried when the acquire ends");
            false
        }
    }
}

/// A waiter's pause after an attempt (or a subscription) that failed with a transient error:
/// the next attempt is made when it ends, if the wait has not run out by then.
pub(crate) async fn pause(
    backoff: &mut Backoff,
    error: &Error,
    labels: Labels,
    now: Instant,
    give_up: Instant,
) {
    metrics::acquire_retry(labels);
    let retry_at = backoff.next(now, give_up);
    tracing::debug!(%error, retry_in_ms = millis_ceil(retry_at - now), "acquire failed transiently; retrying within the wait");
    tokio::time::sleep_until(retry_at).await;
}
