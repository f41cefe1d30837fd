//! The fencing token of a lock taken over a RedLock quorum (`Config::redlock`).
//!
//! Each master keeps its own fence floor (the fenced acquire raises it), and the masters'
//! clocks differ, so the largest token of one majority is not by itself above an earlier
//! holder's token from another majority. Two more rounds make it so, once a majority granted
//! the lock: read the floors of a majority, take a token above all of them (and at least the
//! largest the acquire handed out), and raise the floors of a majority to it before handing it
//! out. A later holder's read reaches a majority, so at least one master whose floor this
//! holder raised; it reads it only after its own acquire saw this holder's lock gone (released
//! after the raise, or expired, which the validity check puts after the raise), so its token is
//! strictly larger.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::deploy::redlock::quorum::majority;
use crate::error::{Error, Operation};
use crate::lease::guaranteed_until;
use crate::wire::calls::FenceFloorCall;
use crate::wire::keys::LockKeys;

/// The token for a lock just taken by a majority whose largest fenced-acquire token was
/// `taken` (the acquire was sent at `sent_at`). Fails with [`Error::NoQuorum`] when a round
/// does not reach a majority, or when the lease's validity ran out meanwhile; the caller then
/// releases the lock.
pub(crate) async fn token(
    client: &Client,
    keys: &LockKeys,
    taken: u64,
    ttl: Duration,
    sent_at: Instant,
) -> Result<u64, Error> {
    let name = keys.name();
    let retention = client.config().fence_retention.max(ttl);
    let id = client.new_request_id();
    let read = FenceFloorCall {
        keys,
        id: id.as_bytes(),
        raise_to: 0,
        retention,
    };
    let floor = client.call(Operation::Acquire, name, &read).await?;
    let token = taken.max(floor.saturating_add(1));
    let id = client.new_request_id();
    let raise = FenceFloorCall {
        keys,
        id: id.as_bytes(),
        raise_to: token,
        retention,
    };
    client.call(Operation::Acquire, name, &raise).await?;
    if Instant::now() >= guaranteed_until(sent_at, ttl) {
        return Err(Error::NoQuorum {
            op: Operation::Acquire,
            key: name.to_owned(),
            agreed: 0,
            required: majority(client.quorum_size()),
        });
    }
    Ok(token)
}
