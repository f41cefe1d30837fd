//! Several locks taken together, all or none (`lock_all`): a set is a kind of hold that spans
//! several names. Its guard, lease, renewal, `run`, re-entry and wait are the common machinery
//! over every lock of the set; what is the set's own is here: the canonical order, the
//! all-or-none attempt (one `ACQUIRE_ALL` call per hash slot group) and the set's release.
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
//! queue across slot groups).
//!
//! **In its turn.** Where the set is one call (one server, Sentinel, a cluster whose set lies in
//! one hash slot) a waiting set queues at the lock it finds held, as a lock's waiter does, and
//! that lock's release hands it over; its next attempt takes the whole set if the other locks
//! are free, and otherwise gives the handed lock back (to that lock's next waiter) and queues
//! at the lock now held, with the same ticket (`place`, `scripts::ACQUIRE_ALL`). So a set
//! still holds nothing while it waits, and its early ticket puts it first in each queue it
//! joins; among users of its single locks it can still be overtaken between two of its
//! attempts.

use std::ops::Range;
use std::time::Duration;

use crate::client::waiting::queue::Place;
use crate::client::Client;
use crate::error::{Error, Operation};
use crate::lock::kind::one_or_many::OneOrMany;
use crate::lock::kind::variant::{Found, Kind, Target};
use crate::lock::terms::Terms;
use crate::wire::calls::{worst, SetAcquireCall, SetAcquired, SetReleaseCall};
use crate::wire::calls::{Acquired, Released};
use crate::wire::keys::{hash_slot, LockKeys};
use crate::wire::scripts::grant_window;

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

/// The locks of the set `first` and `others` through `client`, in canonical order, and the
/// kind they are taken as: a set of one distinct name is that lock.
pub(crate) fn keys(
    client: &Client,
    first: &str,
    others: &[String],
) -> Result<(Kind, OneOrMany<LockKeys>), Error> {
    let prefix = &client.config().key_prefix;
    let keys = canonical(prefix, first, others, client.routes_by_slot())?;
    let kind = match keys.len() {
        1 => Kind::Exclusive,
        _ => Kind::Set,
    };
    Ok((kind, keys.into()))
}

/// The checks a set adds to a lock's: at least one name, no fenced set over RedLock.
pub(crate) fn check(name: &str, terms: &Terms, client: &Client) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "lock_all is given no names: a set needs at least one lock".to_owned()
    } else if terms.fenced && client.rounds_tokens() {
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

/// The place of a set's waiter (`waits`; its attempts go in `groups` calls): where the whole
/// set is one call (one server, Sentinel, a cluster whose set lies in one hash slot) it waits
/// in the queue of the lock it finds held and is handed that lock by its release, for its grant
/// window; it always confirms the grant with one more attempt, which takes the whole set if
/// the other locks are free (see `scripts::ACQUIRE_ALL`). Over several slot groups, and over
/// RedLock, it is not queued: it is woken and tries again.
pub(crate) fn place(client: &Client, terms: &Terms, waits: bool, groups: usize) -> Place {
    match waits && groups == 1 && client.hands_over() {
        true => Place::handed(grant_window(terms.ttl), true),
        false => Place::default(),
    }
}

/// One attempt at the whole set: one `ACQUIRE_ALL` call per slot group, in order, stopping at
/// the first group not taken; in its turn (`place`: queued, one group) from its waiter's queue.
pub(crate) async fn attempt(
    target: Target<'_>,
    (groups, place): (&[Range<usize>], Place),
    terms: &Terms,
) -> Result<Found, Error> {
    let client = target.client;
    let turn = place.turn(client.publishes_sharded());
    let wait = client.replica_wait(terms.min_replicas);
    let required = wait.map_or(0, |w| w.replicas);
    let mut tokens = Vec::new();
    let mut acked_min = usize::MAX;
    for (g, group) in groups.iter().enumerate() {
        let keys = &target.keys[group.clone()];
        let id = client.new_request_id();
        let call = SetAcquireCall {
            keys,
            value: target.value.as_bytes(),
            id: id.as_bytes(),
            ttl: terms.ttl,
            fenced: terms.fenced.then_some(client.config().fence_retention),
            wait,
            turn,
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
        let (pttl, incompatible) = match found {
            Acquired::Taken { .. } => {
                tokens.extend(taken);
                acked_min = acked_min.min(acked.unwrap_or(0));
                continue;
            }
            Acquired::Busy { pttl, .. } => (pttl, false),
            Acquired::Readers { pttl } => (Some(pttl), false),
            Acquired::Incompatible => (None, true),
        };
        return Ok(Found::NotTaken {
            at: group.start + at,
            pttl,
            pass: 0,
            incompatible,
            partial: g > 0,
        });
    }
    Ok(Found::Taken {
        tokens,
        acked: wait.map(|_| (acked_min, required)),
    })
}

/// The set's release: one `RELEASE_MANY` call per slot group (one in all off a cluster); what
/// the worst of them found.
pub(crate) async fn release(target: Target<'_>, keep: Duration) -> Result<Released, Error> {
    let client = target.client;
    let sharded = client.publishes_sharded();
    let mut found = Vec::new();
    for group in slot_groups(target.keys, client.routes_by_slot()) {
        let keys = &target.keys[group];
        let id = client.new_request_id();
        let call = SetReleaseCall {
            keys,
            owner: target.value,
            id: id.as_bytes(),
            keep,
            sharded,
            handoff: client.hands_over(),
        };
        found.push(
            client
                .call(Operation::Release, keys[0].name(), &call)
                .await?,
        );
    }
    Ok(worst(&found))
}
