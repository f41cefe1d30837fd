//! Re-entry: an acquisition of a lock its call chain already holds joins the outer hold.

use tokio::time::Instant;

use crate::deploy::redlock::quorum;
use crate::error::{Error, LossReason, Operation};
use crate::lock::acquire::Terms;
use crate::lock::attempt::into_guard;
use crate::lock::context::Outer;
use crate::lock::guard::LockGuard;
use crate::lock::permits;
use crate::wire::calls::{RenewCall, RenewItem, Renewed};

/// Re-enters a lock this call chain holds: no hold is written to Redis (holds are counted on
/// the client), but one round trip checks that the outer hold is still ours and makes the
/// key's expiry reach at least this hold's ttl (never shortening it). If the outer hold is
/// gone the re-entry fails with [`Error::Lost`] and the outer hold is marked lost too: a lost
/// lock is never re-created under its old owner.
pub(crate) async fn reenter(
    outer: Outer,
    terms: &Terms,
    started: Instant,
) -> Result<LockGuard, Error> {
    let name = outer.hold.keys.name();
    permits::check_reentry(name, outer.hold.kind, terms.kind)?;
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
    let items = [RenewItem {
        key: outer.hold.keys.lock().into(),
        value: outer.hold.value.as_str().into(),
        ttl: terms.ttl,
    }];
    let id = client.new_request_id();
    let call = RenewCall {
        id: id.as_bytes(),
        items: &items,
        wait: client.replica_wait(terms.min_replicas),
    };
    // What the `WAIT` requires (`ALL_REPLICAS` resolved as it is sent).
    let required = call.wait.map_or(0, |w| w.replicas);
    let sent_at = Instant::now();
    let switches = client.switches();
    // The check changes nothing but the expiry (only ever later), so it is safe to repeat.
    let (found, acked) = match client.call_acked(Operation::Acquire, name, &call).await {
        Err(error) if error.is_connection_failure() => {
            tracing::debug!(%error, "re-entry check reply lost; retrying");
            client.call_acked(Operation::Acquire, name, &call).await?
        }
        other => other?,
    };
    let reason = match found.first() {
        // The outer hold stays as it was (its own acquire was acknowledged); only this
        // extension is not durable enough.
        Some(Renewed::Yes) if acked.unwrap_or(0) < required => {
            return Err(Error::Unreplicated {
                key: name.to_owned(),
                acknowledged: acked.unwrap_or(0),
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
            ));
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
                required: quorum::majority(client.quorum_size()),
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
