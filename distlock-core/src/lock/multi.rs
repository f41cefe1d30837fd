//! Several locks taken together, all or none ([`lock_all`]): a set is a lock whose hold spans
//! several names. Its guard, lease, renewal, `run`, re-entry and release are the lock's
//! machinery over every lock of the set; what is the set's own is here: the canonical order,
//! the all-or-none acquire (one `ACQUIRE_ALL` call per hash slot group) and its wait, and the
//! set's release.
//!
//! **Never deadlocking.** The names are sorted and duplicates removed before anything is sent
//! (`from == to` is one lock), so every caller takes any two locks in the same order; and a
//! caller never waits while it holds a part of a set: on one server (and Sentinel, and each
//! RedLock master) the whole set is one script, which takes all or nothing; in a Redis
//! Cluster, whose scripts cannot span hash slots, the set is taken one slot group at a time in
//! a fixed global order (slot, then name), and a group found busy first releases the groups
//! already taken, then waits for the busy lock's release (or its ttl), then starts over. The
//! cost there: one round trip per slot group for an acquire (plus one release round trip per
//! group taken when a later group is busy), and a set can be overtaken while it waits (no
//! queue across locks), as a lock can.

use std::ops::Range;

use tokio::time::Instant;

use crate::client::waiters::Subscription;
use crate::client::Client;
use crate::error::{Error, HeldBy, Operation};
use crate::lease::{deadline_after, millis_ceil};
use crate::lock::acquire::{lock, LockBuilder, Terms};
use crate::lock::attempt::{into_guard, unreplicated};
use crate::lock::backoff::Backoff;
use crate::lock::context::{self, Outer};
use crate::lock::guard::{Hold, LockGuard, ReleaseOnDrop, Released};
use crate::lock::permits::Kind;
use crate::lock::reenter::reenter;
use crate::lock::waiting::{pause, NO_EXPIRY_RECHECK};
use crate::metrics::Waiting;
use crate::wire::calls::Acquired;
use crate::wire::keys::{hash_slot, LockKeys};
use crate::wire::sets::{worst, SetAcquireCall, SetAcquired, SetReleaseCall};

/// Starts building one acquisition of several locks at once, all or none, through the default
/// client (see [`crate::init`]): the guard (or `run`'s body) holds every one of `names`.
///
/// The order of `names` does not matter and a name may appear twice (`from == to`): the set is
/// sorted and its duplicates removed before anything is sent, so two callers naming the same
/// locks in any order never deadlock (see the crate docs, "Sets of locks"). A set of one
/// distinct name is that lock.
///
/// The builder is the lock's ([`LockBuilder`]): `.ttl()`, `.renew()`, `.wait()`,
/// `.min_hold()`, `.max_hold()`, `.min_replicas()`, `.fenced()` (one token per lock, see
/// [`LockGuard::token_of`](crate::LockGuard::token_of) and [`crate::fencing_token_of`]),
/// `.acquire()` and `.run(body)`. Every guarantee of a lock holds for the set: one lease, until
/// the earliest of its locks' deadlines; renewal extends every lock, and the loss of any lock
/// is the loss of the set (`run`'s body cancelled, [`Error::Lost`]); a dropped acquire or guard
/// leaves none of the locks held. A set applies to locks: with `.read()` or a semaphore the
/// acquire fails with [`Error::InvalidConfig`], as does an empty set, or a fenced set over a
/// RedLock quorum.
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::Error> {
/// use std::time::Duration;
/// let guard = distlock::lock_all(["account:7", "account:3"])
///     .ttl(Duration::from_secs(5))
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// assert_eq!(guard.names().collect::<Vec<_>>(), ["account:3", "account:7"]);
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub fn lock_all<I>(names: I) -> LockBuilder
where
    I: IntoIterator,
    I::Item: Into<String>,
{
    let mut names = names.into_iter().map(Into::into);
    let first = names.next().unwrap_or_default();
    lock(first).with_others(names.collect())
}

impl Client {
    /// Starts building one acquisition of several locks at once through this client (see
    /// [`crate::lock_all`]).
    pub fn lock_all<I>(&self, names: I) -> LockBuilder
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let mut names = names.into_iter().map(Into::into);
        let first = names.next().unwrap_or_default();
        self.lock(first).with_others(names.collect())
    }
}

/// The keys of a set in its canonical order: sorted by name (in a cluster, `per_slot`, by hash
/// slot first, so each slot's locks are one group), duplicates removed. The same names give
/// the same order in every process, whatever order they were given in.
pub(crate) fn canonical(
    prefix: &str,
    first: &str,
    others: &[String],
    per_slot: bool,
) -> Result<Vec<LockKeys>, Error> {
    let mut keys = std::iter::once(first)
        .chain(others.iter().map(String::as_str))
        .map(|name| LockKeys::new(prefix, name))
        .collect::<Result<Vec<_>, _>>()?;
    let slot = |k: &LockKeys| match per_slot {
        true => hash_slot(k.lock().as_bytes()),
        false => 0,
    };
    keys.sort_by(|a, b| (slot(a), a.name()).cmp(&(slot(b), b.name())));
    keys.dedup_by(|a, b| a.name() == b.name());
    Ok(keys)
}

/// The checks a set adds to a lock's: a kind of lock that sets support, at least one name, no
/// fenced set over RedLock.
pub(crate) fn check(name: &str, kind: Kind, fenced: bool, client: &Client) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "lock_all is given no names: a set needs at least one lock".to_owned()
    } else if kind != Kind::Mutex {
        format!("the set of locks starting with `{name}` is asked for as a semaphore or a shared (read) hold: sets of locks are exclusive locks only")
    } else if fenced && client.is_quorum() {
        format!("the set of locks starting with `{name}` asks for fencing tokens, which sets do not support over `Config::redlock` yet; use one server, a Redis Cluster or Sentinel, or one lock")
    } else {
        return Ok(());
    };
    Err(Error::InvalidConfig { reason })
}

/// The locks of a set (in canonical order) that one call can carry: consecutive runs of one
/// hash slot in a cluster (`per_slot`), else all of them.
pub(crate) fn slot_groups(keys: &[LockKeys], per_slot: bool) -> Vec<Range<usize>> {
    if !per_slot {
        return std::iter::once(0..keys.len()).collect();
    }
    let mut groups: Vec<Range<usize>> = Vec::new();
    let mut last = None;
    for (i, k) in keys.iter().enumerate() {
        let slot = hash_slot(k.lock().as_bytes());
        match groups.last_mut() {
            Some(group) if last == Some(slot) => group.end = i + 1,
            _ => groups.push(i..i + 1),
        }
        last = Some(slot);
    }
    groups
}

/// What one attempt at a set found.
enum Found {
    /// Every lock taken; the tokens (fenced), and the replicas that acknowledged the fewest
    /// and the `WAIT`'s requirement, when replicas were asked for.
    Taken {
        tokens: Vec<u64>,
        acked: Option<(usize, usize)>,
    },
    /// Lock `at` is held by another owner (for `pttl` ms), or is not a lock (`incompatible`);
    /// `partial`: an earlier slot group of the set was taken by this attempt.
    NotTaken {
        at: usize,
        pttl: Option<i64>,
        incompatible: bool,
        partial: bool,
    },
}

/// Acquires a set (at least two distinct locks, in canonical order): the acquire/wait loop of
/// a set (see the module docs).
pub(crate) async fn acquire(
    client: Client,
    set: Vec<LockKeys>,
    terms: Terms,
) -> Result<LockGuard, Error> {
    let started = Instant::now();
    if let Some(outer) = reentry(&client, &set)? {
        return reenter(outer, &terms, started).await;
    }
    let give_up = terms.wait.map(|w| deadline_after(started, w));
    let groups = slot_groups(&set, client.sharded_pubsub());
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
        let found = match attempt(&hold, &groups, &terms).await {
            Err(error) if give_up.is_some() && error.is_transient() => {
                failed = Some(error);
                None
            }
            Err(error) => return Err(error),
            Ok(found) => Some(found),
        };
        let (at, pttl) = match found {
            Some(Found::Taken { tokens, acked }) => {
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
            Some(Found::NotTaken {
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
                    Some(ms) => deadline_after(now, std::time::Duration::from_millis(ms.max(1))),
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
        None => std::time::Duration::ZERO,
    };
    tracing::debug!(waited_ms = millis_ceil(waited), "busy");
    Error::Busy {
        key: hold.set[at].name().to_owned(),
        waited,
        held_by: HeldBy::Owner,
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

/// One attempt at the whole set: one `ACQUIRE_ALL` call per slot group, in order, stopping at
/// the first group not taken.
async fn attempt(hold: &Hold, groups: &[Range<usize>], terms: &Terms) -> Result<Found, Error> {
    let client = &hold.client;
    let wait = client.replica_wait(terms.min_replicas);
    let required = wait.map_or(0, |w| w.replicas);
    let mut tokens = Vec::new();
    let mut acked_min = usize::MAX;
    for (g, group) in groups.iter().enumerate() {
        let keys = &hold.set[group.clone()];
        let id = client.new_request_id();
        let call = SetAcquireCall {
            keys,
            value: hold.value.as_bytes(),
            id: id.as_bytes(),
            ttl: terms.ttl,
            fenced: terms.fenced.then_some(client.config().fence_retention),
            wait,
        };
        let name = keys[0].name();
        // A dropped connection is retried once with the same value: a take whose reply was
        // lost reads as our own.
        let (found, acked) = match client.call_acked(Operation::Acquire, name, &call).await {
            Err(error) if error.is_connection_failure() => {
                tracing::debug!(%error, "acquire reply lost; retrying with the same value");
                client.call_acked(Operation::Acquire, name, &call).await?
            }
            other => other?,
        };
        let SetAcquired {
            found,
            at,
            tokens: taken,
        } = found;
        match found {
            Acquired::Taken { .. } => {
                tokens.extend(taken);
                acked_min = acked_min.min(acked.unwrap_or(0));
            }
            Acquired::Busy { pttl, .. } => {
                return Ok(Found::NotTaken {
                    at: group.start + at,
                    pttl,
                    incompatible: false,
                    partial: g > 0,
                })
            }
            Acquired::Incompatible => {
                return Ok(Found::NotTaken {
                    at: group.start + at,
                    pttl: None,
                    incompatible: true,
                    partial: g > 0,
                })
            }
        }
    }
    Ok(Found::Taken {
        tokens,
        acked: wait.map(|_| (acked_min, required)),
    })
}

/// The set's release: one `RELEASE_MANY` call per slot group (one in all off a cluster); what
/// the worst of them found.
pub(crate) async fn release(hold: &Hold) -> Result<Released, Error> {
    let client = &hold.client;
    let sharded = client.sharded_pubsub();
    let keep = hold.keep();
    let mut found = Vec::new();
    for group in slot_groups(&hold.set, sharded) {
        let keys = &hold.set[group];
        let id = client.new_request_id();
        let call = SetReleaseCall {
            keys,
            owner: &hold.value,
            id: id.as_bytes(),
            keep,
            sharded,
            handoff: !client.is_quorum(),
        };
        found.push(
            client
                .call(Operation::Release, keys[0].name(), &call)
                .await?,
        );
    }
    Ok(worst(&found))
}

/// The outer hold a set re-enters: one hold of this call chain that holds every lock of the
/// set. A call chain that holds some of them but not all in one hold may not take the set (it
/// would wait holding a part of it): [`Error::InvalidConfig`].
fn reentry(client: &Client, set: &[LockKeys]) -> Result<Option<Outer>, Error> {
    let mut outer: Option<Outer> = None;
    let mut held = Vec::new();
    for keys in set {
        if let Some(found) = context::reentry(client.identity(), keys.name()) {
            held.push(keys.name());
            outer.get_or_insert(found);
        }
    }
    match outer {
        None => Ok(None),
        Some(outer)
            if held.len() == set.len() && set.iter().all(|k| outer.hold.covers(k.name())) =>
        {
            Ok(Some(outer))
        }
        Some(_) => Err(Error::InvalidConfig {
            reason: format!(
                "a set of locks is taken inside a body that already holds {}, but not the whole set in one hold: take every lock of the set together, outside (holding some while waiting for the others could deadlock)",
                held.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}
