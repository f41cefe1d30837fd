//! Re-entry: an acquisition of a lock its call chain already holds joins the outer hold.

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, LossReason, Operation};
use crate::lock::attempt::into_guard;
use crate::lock::context::{self, Outer};
use crate::lock::guard::LockGuard;
use crate::lock::kind::Kind;
use crate::lock::terms::Terms;
use crate::wire::calls::{RenewCall, RenewItem, Renewed};
use crate::wire::keys::LockKeys;

/// The outer hold an acquisition of the locks `keys` (one, or a set's) re-enters, if this call
/// chain holds them through `client`: one hold that holds every one of them (its token the
/// first held lock's). A call chain that holds some of a set's locks but not all in one hold
/// may not take the set (it would wait holding a part of it): [`Error::InvalidConfig`].
pub(crate) fn outer(client: &Client, keys: &[LockKeys]) -> Result<Option<Outer>, Error> {
    let mut outer: Option<Outer> = None;
    let mut held = Vec::new();
    for lock in keys {
        if let Some(found) = context::reentry(client.identity(), lock.name()) {
            held.push(lock.name());
            outer.get_or_insert(found);
        }
    }
    match outer {
        None => Ok(None),
        Some(outer)
            if held.len() == keys.len() && keys.iter().all(|k| outer.hold.covers(k.name())) =>
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

/// Re-enters a lock this call chain holds: no hold is written to Redis (holds are counted on
/// the client), but one round trip checks that the outer hold is still ours and makes the
/// key's expiry reach at least this hold's ttl (never shortening it). If the outer hold is
/// gone the re-entry fails with [`Error::Lost`] and the outer hold is marked lost too: a lost
/// lock is never re-created under its old owner.
pub(crate) async fn reenter(
    outer: Outer,
    kind: Kind,
    terms: &Terms,
    started: Instant,
) -> Result<LockGuard, Error> {
    let name = outer.hold.keys()[outer.named].name();
    outer.hold.kind.admits(name, kind)?;
    // Re-entering a hold that is known lost: no round trip can make it ours again.
    if let Some(reason) = outer.lease.lost_reason() {
        return Err(Error::Lost {
            key: name.to_owned(),
            reason,
        });
    }
    if terms.fenced && outer.token.is_none() {
        return Err(Error::InvalidConfig {
            reason: format!("lock `{name}` is re-entered with `fenced`, but its outer hold was taken without a fencing token: fence the outer lock too"),
        });
    }
    let client = &outer.hold.client;
    let sent_at = Instant::now();
    let switches = client.switches();
    let (found, acked, required) = check_outer(&outer, terms).await?;
    let reason = match found {
        // The outer hold stays as it was (its own acquire was acknowledged); only this
        // extension is not durable enough.
        Some(Renewed::Yes) if acked < required => {
            return Err(Error::Unreplicated {
                key: name.to_owned(),
                acknowledged: acked,
                required,
            });
        }
        Some(Renewed::Yes) => {
            let hold = outer.hold.enter();
            return Ok(into_guard(
                hold,
                outer.token,
                true,
                terms,
                (sent_at, switches),
                started,
                None,
            )
            .naming(outer.named));
        }
        Some(Renewed::Gone) | None => LossReason::Expired,
        Some(Renewed::OtherOwner | Renewed::NotALock) => LossReason::Stolen,
        // Only a batch of several locks settles with an undecided one (one lock fails the
        // call as `NoQuorum` instead); the same error here, the outer hold as it was.
        Some(Renewed::Undecided) => {
            return Err(Error::NoQuorum {
                op: Operation::Acquire,
                key: name.to_owned(),
                agreed: 0,
                required: client.majority(),
            })
        }
    };
    if outer.lease.mark_lost(reason) {
        tracing::warn!(key = %name, %reason, "re-entry found the outer hold gone: lock lost");
    }
    Err(Error::Lost {
        key: name.to_owned(),
        reason,
    })
}

/// The re-entry check of every lock of the outer hold (one call, or one per hash slot of a set
/// in a cluster): the first status that is not [`Renewed::Yes`] (else `Yes`), the fewest
/// replicas that acknowledged a call and what the `WAIT` required.
async fn check_outer(
    outer: &Outer,
    terms: &Terms,
) -> Result<(Option<Renewed>, usize, usize), Error> {
    let hold = &outer.hold;
    let (client, name) = (&hold.client, hold.key().name());
    let keys = hold.keys();
    let mut found = Some(Renewed::Yes);
    let (mut acked_min, mut required) = (usize::MAX, 0);
    for group in hold.kind.groups(client, keys).iter().cloned() {
        let items: Vec<RenewItem> = keys[group]
            .iter()
            .map(|keys| hold.kind.renew_item(keys, &hold.value, terms.ttl))
            .collect();
        let id = client.new_request_id();
        let call = RenewCall {
            id: id.as_bytes(),
            items: &items,
            wait: client.replica_wait(terms.min_replicas),
        };
        // What the `WAIT` requires (`ALL_REPLICAS` resolved as it is sent).
        required = call.wait.map_or(0, |w| w.replicas);
        // The check changes nothing but the expiry (only ever later), so it is safe to repeat.
        let (statuses, acked) = match client.call_acked(Operation::Acquire, name, &call).await {
            Err(error) if error.is_connection_failure() => {
                tracing::debug!(%error, "re-entry check reply lost; retrying");
                client.call_acked(Operation::Acquire, name, &call).await?
            }
            other => other?,
        };
        acked_min = acked_min.min(acked.unwrap_or(0));
        if statuses.len() != items.len() {
            found = None;
        }
        if let Some(bad) = statuses.into_iter().find(|s| *s != Renewed::Yes) {
            found = Some(bad);
        }
        if found != Some(Renewed::Yes) {
            break;
        }
    }
    Ok((found, acked_min, required))
}
