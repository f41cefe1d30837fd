//! The acquire/wait loop of one lock: attempts until taken, busy or failed; a busy lock waits
//! for its release (or its holder's ttl); a transient failure pauses (`backoff`) and tries
//! again within the wait; an attempt that may have been applied is released if the acquire
//! gives up or is dropped.
//!
//! ## Handoff
//!
//! On one server, Sentinel and a cluster, a plain lock's waiter (not a fenced one, nor one that
//! asks for replicas) is queued in Redis and handed the lock by the release itself: the release
//! script sets the lock to the first waiter's value and names it in its message
//! (`scripts::RELEASE`, `grant_prelude!`), so the next holder starts after one message, not a
//! message and a round trip, and the waiters of every client and process take their turns in
//! the order they came (their tickets, `queue::handed_ticket`). A waiter whose client already
//! has a waiter of the lock queued in Redis (or waiting so) sends no attempt of its own: it
//! waits in the client, and the client's next release of the lock queues it with its own ticket
//! (`client::cohort`), so a handoff between a client's tasks costs Redis one script, not two.
//!
//! * **The lease of a lock handed over.** The waiter knows only that the grant came after its
//!   last attempt that found the lock held was applied, so after it was sent; the release set
//!   the lock for the waiter's grant window (`scripts::grant_window`: 1 s, or the ttl if
//!   shorter). So the lock is the waiter's for the window from that attempt's send, minus the
//!   usual margin; if less than half of that is left when the grant is heard (the waiter waited
//!   long since its last attempt), it does not trust the grant and asks again: the lock is
//!   found ours and extended to the ttl, one round trip. A trusted grant's lease is extended to
//!   the ttl by the watchdog a third of the way through what is left (`into_guard`), and
//!   without `renew` no further; a short body lets go before that and costs nothing more.
//! * **Waiters that went away.** A waiter that gives up, fails or is dropped leaves the queue
//!   and, if it was handed the lock meanwhile, lets it go again (`queue::QueueEntry`). One
//!   whose process died is handed the lock for its window at most, never its ttl; since nobody
//!   publishes when that window lapses, a handed waiter looks again at least every
//!   `HANDED_RECHECK` (1 s), and a lock found free with an earlier waiter queued is handed to
//!   that one by the finder (`scripts::ACQUIRE_HANDED`).
//! * **Who still wakes and retries.** Fenced waiters (their token comes from their own
//!   acquire), waiters that ask for replicas (their acquire waits for them), writers behind
//!   readers, permits, sets and every waiter over RedLock keep the wake-and-retry path; they
//!   take a lock that is let go with nobody queued, so behind handed waiters they wait for the
//!   queue to empty.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::waiters::Subscription;
use crate::client::Client;
use crate::error::Error;
use crate::lease::{deadline_after, guaranteed_until, millis_ceil};
use crate::lock::attempt::{into_guard, try_acquire, unreplicated};
use crate::lock::backoff::Backoff;
use crate::lock::fence;
use crate::lock::guard::LockGuard;
use crate::lock::hold::{Hold, ReleaseOnDrop};
use crate::lock::kind::{set, Kind};
use crate::lock::queue::{Place, QueueEntry};
use crate::lock::reenter::{self, reenter};
use crate::lock::terms::Terms;
use crate::metrics::{self, Labels, Waiting};
use crate::wire::calls::{Acquired, NextWaiter};
use crate::wire::keys::LockKeys;

/// How often a waiter looks again at a lock whose key has no expiry (someone created it by
/// hand): such a holder never publishes a release and has no ttl to wait out.
pub(crate) const NO_EXPIRY_RECHECK: Duration = Duration::from_secs(1);

/// The longest a waiter to whom a release may hand the lock waits between two attempts.
const HANDED_RECHECK: Duration = Duration::from_secs(1);

pub(crate) async fn acquire(
    client: Client,
    keys: LockKeys,
    kind: Kind,
    terms: Terms,
) -> Result<LockGuard, Error> {
    let started = Instant::now();
    if let Some(outer) = reenter::outer(&client, &keys) {
        return reenter(outer, kind, &terms, started).await;
    }
    let give_up = terms.wait.map(|w| deadline_after(started, w));
    let owner = client.new_owner();
    let hold = Hold::new(client.clone(), keys, owner, kind);
    let keys = &hold.keys;
    let mut subscription: Option<Subscription> = None;
    let mut waiting = Waiting::default();
    // Tasks of this client already wait for the lock: queue behind them instead of barging.
    let mut queue_first = give_up.is_some() && client.has_waiters(keys.channel());
    // The last attempt's transient failure (a reset or timed-out connection, `NoQuorum`, a
    // server loading or failing over), if it failed so: what the waiter is told when its wait
    // runs out, and the reason to pause (`backoff`) instead of waiting for a release.
    let mut failed: Option<Error> = None;
    let mut backoff = Backoff::default();
    // Armed from the first attempt that failed transiently on one server until the lock is
    // taken: that request may still take the lock (its reply lost, or it arrives late). A later
    // attempt (same value) reads such a take as its own; giving up, or being dropped, releases
    // it in the background (owner-checked: another owner's lock is left alone).
    let mut unanswered: Option<ReleaseOnDrop> = None;
    // RedLock: a waiter's place in the masters' queues (0: it does not wait, or it takes a
    // permit or a read hold, which retry without a queue: see `kind::permits`), and its entry
    // there once it queued (from its first attempt after subscribing: an acquire that takes
    // the lock at once never queues), taken out again when the acquire ends.
    //
    // One server, Sentinel, a cluster: a plain lock's waiter queues in Redis and is handed
    // the lock by the release itself (see the module docs, "Handoff"): `window` is its grant
    // window while it is such a waiter. Not a fenced one (its token comes from its own acquire)
    // nor one that asks for replicas (its acquire waits for them): those are woken and try
    // again.
    let Place {
        ticket, mut window, ..
    } = kind.place(&client, &terms, give_up.is_some());
    // The last queued attempt that found the lock held (when it was sent, and the epoch then):
    // a grant heard after its reply came after it.
    let mut last_busy: Option<(Instant, u64)> = None;
    let mut queued: Option<QueueEntry> = None;
    // A write that met readers: this and every later attempt goes as `ACQUIRE_WRITE`.
    let mut met_readers = false;
    loop {
        let mut pttl = None;
        // RedLock: release wakes to let pass (the waiters queued ahead take those turns).
        let mut pass_wakes = 0;
        if !std::mem::take(&mut queue_first) {
            if let Some(sub) = subscription.as_mut() {
                sub.mark_seen();
            }
            // Armed while the request may have been applied: cancelled or failed here, the lock
            // is released in the background.
            let unanswered_before = unanswered.is_some();
            let mut pending = unanswered
                .take()
                .unwrap_or_else(|| ReleaseOnDrop::new(hold.clone()));
            let queue = ticket > 0 && subscription.is_some();
            if queue {
                queued.get_or_insert_with(|| queue_entry(&hold, window.is_some()));
            }
            let sent_at = Instant::now();
            let switches = client.switches();
            let place = Place {
                ticket,
                queue,
                window,
            };
            let (attempt, acked) = match try_acquire(&hold, &terms, place, &mut met_readers).await {
                // A waiter tries again, after a pause, until its wait runs out. (RedLock's
                // `NoQuorum` included: a split vote, masters that did not answer.)
                Err(error) if give_up.is_some() && error.is_transient() => {
                    failed = Some(error);
                    (
                        Acquired::Busy {
                            pttl: None,
                            pass: 0,
                        },
                        None,
                    )
                }
                other => {
                    failed = None;
                    other?
                }
            };
            let attempt = match attempt {
                // RedLock: a token above every earlier holder's (failing, the lock is released).
                Acquired::Taken { token: Some(taken) } if client.is_quorum() => Acquired::Taken {
                    token: Some(fence::token(&client, keys, taken, terms.ttl, sent_at).await?),
                },
                other => other,
            };
            if client.is_quorum() && !matches!(attempt, Acquired::Taken { .. }) {
                // A minority of the RedLock masters may have granted it: release it there
                // before anything else (a later attempt reuses the value).
                if let Err(error) = hold.release(None).await {
                    tracing::debug!(%error, "release after a RedLock attempt without a majority failed");
                }
            }
            if window.is_some() && met_readers {
                // A write that met readers no longer queues: out of the queue (a lock handed
                // over meanwhile is released and handed on), woken like other writers.
                window = None;
                queued = None;
            }
            if queue
                && window.is_some()
                && failed.is_none()
                && matches!(attempt, Acquired::Busy { .. })
            {
                last_busy = Some((sent_at, switches));
                if let Some(sub) = subscription.as_mut() {
                    sub.queued();
                }
            }
            let stale = failed.is_some() || unanswered_before;
            if stale && !client.is_quorum() && !matches!(attempt, Acquired::Taken { .. }) {
                unanswered = Some(pending);
            } else {
                pending.disarm();
            }
            match attempt {
                Acquired::Taken { .. } if acked.is_some_and(|(n, required)| n < required) => {
                    let (n, required) = acked.unwrap_or_default();
                    return Err(unreplicated(hold, n, required).await);
                }
                Acquired::Taken { token } => {
                    if let Some(entry) = queued.as_mut() {
                        entry.took();
                    }
                    if let Some(sub) = subscription.as_mut() {
                        sub.took();
                    }
                    waiting.acquired(started);
                    return Ok(into_guard(
                        hold,
                        token,
                        false,
                        &terms,
                        (sent_at, switches),
                        started,
                        None,
                    ));
                }
                Acquired::Busy { pttl: left, pass } => {
                    pttl = left;
                    pass_wakes = pass;
                }
                Acquired::Incompatible => {
                    return Err(Error::Incompatible {
                        key: keys.name().to_owned(),
                    })
                }
            }
        }
        let now = Instant::now();
        let busy = || {
            // Without `wait` the caller did not wait, whatever the round trip took.
            let waited = match terms.wait {
                Some(_) => Instant::now() - started,
                None => Duration::ZERO,
            };
            tracing::debug!(waited_ms = millis_ceil(waited), "busy");
            Err(Error::Busy {
                key: keys.name().to_owned(),
                waited,
                held_by: kind.held_by(met_readers),
            })
        };
        let Some(give_up) = give_up.filter(|&g| now < g) else {
            return match failed {
                Some(error) => Err(error),
                None => busy(),
            };
        };
        if let Some(error) = &failed {
            pause(&mut backoff, error, terms.label, now, give_up).await;
            continue;
        }
        backoff.reset();
        match (subscription.as_mut(), window) {
            // Subscribed and at the head of the queue: try again at once, the lock may have
            // been released meanwhile.
            (None, _) => {
                let sub = match client.subscribe(keys.channel(), keys.name()).await {
                    Ok(sub) => subscription.insert(sub),
                    Err(error) if error.is_transient() => {
                        pause(&mut backoff, &error, terms.label, Instant::now(), give_up).await;
                        failed = Some(error);
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                waiting.start(terms.label);
                if window.is_some() {
                    // Every waiter of this client is handed the lock in turn: queued in Redis
                    // by an attempt of its own, or behind one of this client's waiters already
                    // queued, by this client's next release of the lock (its cohort).
                    sub.expect_grant(hold.value.as_bytes());
                    let next = NextWaiter {
                        value: hold.value,
                        ticket,
                    };
                    if sub.defer(next) {
                        // Leaves the queue in Redis too if it goes away once a release queued
                        // it there.
                        let deferral = sub.deferral();
                        queued.get_or_insert_with(|| queue_entry(&hold, true).deferred(deferral));
                        queue_first = true;
                    }
                } else if !sub.take_turn(give_up).await {
                    return busy();
                }
            }
            (Some(sub), Some(window)) => {
                // Also at least every `HANDED_RECHECK`: a lock handed to a waiter that went
                // away is free again after its window, and nobody publishes that.
                let recheck = match pttl.and_then(|ms| u64::try_from(ms).ok()) {
                    Some(ms) => deadline_after(now, Duration::from_millis(ms.max(1))),
                    None => now + NO_EXPIRY_RECHECK,
                };
                let recheck = recheck.min(now + HANDED_RECHECK).min(give_up);
                if sub.wait_grant(recheck).await {
                    // Queued by its own attempt, or by a release of this client: whichever came
                    // last (the grant came after both).
                    let last_busy = last_busy.max(sub.carried());
                    if let Some(guard) = granted(&hold, &terms, last_busy, window, started) {
                        if let Some(entry) = queued.as_mut() {
                            entry.took();
                        }
                        sub.took();
                        waiting.acquired(started);
                        return Ok(guard);
                    }
                }
            }
            (Some(sub), None) => {
                // A holder that crashed never publishes: look again when its lease runs out
                // (a key without expiry, -1, has no lease to wait out).
                let recheck = match pttl.and_then(|ms| u64::try_from(ms).ok()) {
                    Some(ms) => deadline_after(now, Duration::from_millis(ms.max(1))),
                    None => now + NO_EXPIRY_RECHECK,
                };
                sub.wait_until(recheck.min(give_up), pass_wakes).await;
            }
        }
    }
}

/// The waiter's entry in the queue of its hold's lock (`handed`: a release may hand it the
/// lock).
fn queue_entry(hold: &Hold, handed: bool) -> QueueEntry {
    QueueEntry::new(hold.client.clone(), hold.keys.clone(), hold.value, handed)
}

/// The guard of a lock a release handed to this waiter: ours for the grant `window` from the
/// last queued attempt that found the lock held (`last_busy`: the grant came after it was
/// applied, so after it was sent, and lasts the window from then, or until the entry's lapse,
/// which is later), if at least half of that is left (otherwise `None`: the next attempt finds
/// the lock ours and extends it to the ttl, one round trip).
fn granted(
    hold: &Hold,
    terms: &Terms,
    last_busy: Option<(Instant, u64)>,
    window: Duration,
    started: Instant,
) -> Option<LockGuard> {
    let (sent_at, switches) = last_busy?;
    let left = guaranteed_until(sent_at, window).saturating_duration_since(Instant::now());
    if left < window / 2 {
        tracing::debug!(
            left_ms = millis_ceil(left),
            "lock handed over too late in its window to trust; asking again"
        );
        return None;
    }
    tracing::trace!("lock handed over by the release");
    Some(into_guard(
        hold.clone(),
        None,
        false,
        terms,
        (sent_at, switches),
        started,
        Some(window),
    ))
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

/// Acquires a set (at least two distinct locks, in canonical order): the acquire/wait loop of
/// a set (see the module docs).
pub(crate) async fn acquire_set(
    client: Client,
    set: Vec<LockKeys>,
    terms: Terms,
) -> Result<LockGuard, Error> {
    let started = Instant::now();
    if let Some(outer) = reenter::outer_of_set(&client, &set)? {
        return reenter(outer, Kind::Set, &terms, started).await;
    }
    let give_up = terms.wait.map(|w| deadline_after(started, w));
    let groups = set::slot_groups(&set, client.sharded_pubsub());
    let hold = Hold::new_set(client.clone(), set, client.new_owner());
    // Armed for the whole acquire: whatever an attempt may have taken is released (in the
    // background, owner-checked) if the acquire fails or is dropped.
    let mut pending = ReleaseOnDrop::new(hold.clone());
    let mut waiting = Waiting::default();
    let mut backoff = Backoff::default();
    // The busy lock waited for (its index in the set) and its subscription.
    let mut subscription: Option<(usize, Subscription)> = None;
    loop {
        if let Some((_, sub)) = subscription.as_mut() {
            sub.mark_seen();
        }
        let sent_at = Instant::now();
        let switches = client.switches();
        // A transient failure of a waiter's attempt: what it is told if its wait runs out,
        // and the reason to pause (`backoff`) instead of waiting for a release.
        let mut failed: Option<Error> = None;
        let found = match set::attempt(hold.target(), &groups, &terms).await {
            Err(error) if give_up.is_some() && error.is_transient() => {
                failed = Some(error);
                None
            }
            Err(error) => return Err(error),
            Ok(found) => Some(found),
        };
        let (at, pttl) = match found {
            Some(set::Found::Taken { tokens, acked }) => {
                if let Some((n, required)) = acked.filter(|(n, required)| n < required) {
                    pending.disarm();
                    return Err(unreplicated(hold, n, required).await);
                }
                pending.disarm();
                waiting.acquired(started);
                let token = tokens.first().copied();
                if terms.fenced {
                    let _ = hold.tokens.set(tokens.into_boxed_slice());
                }
                return Ok(into_guard(
                    hold,
                    token,
                    false,
                    &terms,
                    (sent_at, switches),
                    started,
                    None,
                ));
            }
            Some(set::Found::NotTaken {
                at,
                pttl,
                incompatible,
                partial,
            }) => {
                // Never wait holding a part of the set: a cluster's earlier slot groups, or
                // RedLock masters that granted the set to this attempt, are released first.
                if partial || client.is_quorum() {
                    release_partial(&hold).await;
                }
                if incompatible {
                    return Err(Error::Incompatible {
                        key: hold.set[at].name().to_owned(),
                    });
                }
                (at, pttl)
            }
            None => {
                // A failed attempt may have taken some of the set: released before the pause.
                release_partial(&hold).await;
                (subscription.as_ref().map_or(0, |(at, _)| *at), None)
            }
        };
        let now = Instant::now();
        let Some(give_up) = give_up.filter(|&g| now < g) else {
            if failed.is_none() && !client.is_quorum() && groups.len() == 1 {
                // One all-or-none call found it busy: nothing of the set is held.
                pending.disarm();
            }
            return match failed {
                Some(error) => Err(error),
                None => Err(busy(&hold, at, &terms, started)),
            };
        };
        if let Some(error) = &failed {
            pause(&mut backoff, error, terms.label, now, give_up).await;
            continue;
        }
        backoff.reset();
        let keys = &hold.set[at];
        match subscription.as_mut() {
            Some((held_at, sub)) if *held_at == at => {
                let recheck = match pttl.and_then(|ms| u64::try_from(ms).ok()) {
                    Some(ms) => deadline_after(now, Duration::from_millis(ms.max(1))),
                    None => now + NO_EXPIRY_RECHECK,
                };
                sub.wait_until(recheck.min(give_up), 0).await;
            }
            // Subscribed to the busy lock (another than before, maybe): try again at once, it
            // may have been released meanwhile.
            _ => {
                subscription = None;
                let mut sub = match client.subscribe(keys.channel(), keys.name()).await {
                    Ok(sub) => sub,
                    Err(error) if error.is_transient() => {
                        pause(&mut backoff, &error, terms.label, Instant::now(), give_up).await;
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                waiting.start(terms.label);
                if !sub.take_turn(give_up).await {
                    return Err(busy(&hold, at, &terms, started));
                }
                subscription = Some((at, sub));
            }
        }
    }
}

/// [`Error::Busy`] for a set found busy at lock `at` when its wait ran out (or without one).
fn busy(hold: &Hold, at: usize, terms: &Terms, started: Instant) -> Error {
    let waited = match terms.wait {
        Some(_) => started.elapsed(),
        None => Duration::ZERO,
    };
    tracing::debug!(waited_ms = millis_ceil(waited), "busy");
    Error::Busy {
        key: hold.set[at].name().to_owned(),
        waited,
        held_by: Kind::Set.held_by(false),
    }
}

/// Releases whatever an attempt may have taken of the set (owner-checked: another owner's
/// lock is left alone); a failure is left to the acquire's cleanup (the release on drop) and
/// to the next attempt (which finds its own locks as a replay).
async fn release_partial(hold: &Hold) {
    match hold.release(None).await {
        Ok(_) => {
            tracing::debug!(key = %hold.keys.name(), "set not taken whole; released what the attempt took before waiting")
        }
        Err(error) => {
            tracing::debug!(key = %hold.keys.name(), %error, "release of a set not taken whole failed; retried when the acquire ends")
        }
    }
}
