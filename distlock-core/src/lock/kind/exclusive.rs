//! The lock: one holder at a time. What it sends to be taken depends on the deployment and
//! its terms: a plain `SET NX PX GET` (pipelined with its `ECHO`, in the group commit), the
//! fenced script (and the `WAIT` of `min_replicas`), over a RedLock quorum the queued script
//! (`ACQUIRE_QUEUED`, the masters' FIFO queue), and elsewhere a waiter's queued attempt
//! (`ACQUIRE_HANDED`), to whom a release hands the lock (see `lock::wait_loop`, "Handoff").
//! A write that meets readers is asked as `shared`'s write from then on.
//!
//! Its release is one key's, as a permit's or a read hold's (the script tells them apart by
//! the key's type): `Kind::release_call`.

use crate::client::waiting::queue::{self, Place};
use crate::client::Client;
use crate::error::{Error, Operation};
use crate::lock::kind::variant::{Kind, Target};
use crate::lock::terms::Terms;
use crate::wire::calls::{
    AcquireCall, Acquired, FencedAcquireCall, HandedAcquireCall, QueuedAcquireCall,
};
use crate::wire::request::ReplicaWait;
use crate::wire::scripts::grant_window;

/// The place of a lock's waiter (`waits`): on one server, Sentinel and a cluster it queues in
/// Redis and is handed the lock by the release, for its grant window; a fenced one, or one
/// that asks for replicas, confirms the grant with one more attempt (its token and its
/// replicas' acknowledgement come from that attempt: `Place::confirm`). Over RedLock every
/// lock's waiter queues on the masters (ticketed, without a window).
pub(crate) fn place(client: &Client, terms: &Terms, waits: bool) -> Place {
    if !waits {
        return Place::default();
    }
    if !client.hands_over() {
        return Place {
            ticket: queue::ticket(),
            ..Place::default()
        };
    }
    handed(terms)
}

/// The place of a waiter to whom a release hands the hold (a lock, or a permit), for its grant
/// window: a fenced one, or one that asks for replicas, confirms the grant with one more
/// attempt; any other trusts it (see `lock::wait_loop`, "Handoff").
pub(crate) fn handed(terms: &Terms) -> Place {
    let confirm = terms.fenced || terms.min_replicas > 0;
    Place::handed(grant_window(terms.ttl), confirm)
}

/// What re-enters a lock (or a set) held by the call chain: the lock, a read (the exclusive
/// hold covers reading) or a set it covers; never a semaphore's permit.
pub(crate) fn admits(name: &str, inner: Kind) -> Result<(), Error> {
    match inner {
        Kind::Exclusive | Kind::Read | Kind::Set => Ok(()),
        Kind::Permits(_) => Err(Error::Incompatible {
            key: name.to_owned(),
        }),
    }
}

/// One acquire request of the lock (see the module docs).
pub(crate) async fn send(
    target: Target<'_>,
    terms: &Terms,
    place: Place,
    (id, replicas): (&[u8], Option<ReplicaWait>),
) -> Result<(Acquired, Option<usize>), Error> {
    let Target { client, value, .. } = target;
    let keys = target.key();
    let name = keys.name();
    let fenced = terms.fenced.then_some(client.config().fence_retention);
    if let (Some(window), true) = (place.window, place.queue) {
        let call = HandedAcquireCall {
            keys,
            value: value.as_bytes(),
            id,
            ttl: terms.ttl,
            ticket: place.ticket,
            window,
            life: place.life(),
            sharded: client.publishes_sharded(),
            confirm: place.confirm.then_some(fenced),
            wait: replicas,
        };
        client.call_acked_one(Operation::Acquire, name, &call).await
    } else if !client.hands_over() {
        let call = QueuedAcquireCall {
            keys,
            value: value.as_bytes(),
            id,
            ttl: terms.ttl,
            fenced,
            ticket: place.ticket,
            queue: place.queue,
            life: place.life(),
        };
        client.call_acked(Operation::Acquire, name, &call).await
    } else if let Some(retention) = fenced {
        let call = FencedAcquireCall {
            keys,
            value: value.as_bytes(),
            id,
            ttl: terms.ttl,
            retention,
            wait: replicas,
        };
        client.call_acked(Operation::Acquire, name, &call).await
    } else {
        let call = AcquireCall {
            keys,
            owner: value,
            id,
            ttl: terms.ttl,
            want_pttl: terms.wait.is_some(),
            wait: replicas,
        };
        client.take(name, &call).await
    }
}
