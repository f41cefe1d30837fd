//! What followers see of an election: the record next to its lock, read in one call.

use std::time::{Duration, SystemTime};

use crate::client::Client;
use crate::error::{Error, Operation};
use crate::wire::calls::{CurrentCall, Record, TermEntry};
use crate::wire::keys::LockKeys;

/// A leader as followers see it ([`LeaderBuilder::observe`](super::LeaderBuilder::observe), [`LeaderBuilder::current`](super::LeaderBuilder::current)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term: strictly increasing per name, and its fencing token.
    pub term: u64,
    /// What the leader said it is ([`LeaderBuilder::identity`](super::LeaderBuilder::identity); by default its host, process
    /// id and program, `host/pid program`).
    pub identity: String,
    /// When the term started, by the Redis server's clock.
    pub since: SystemTime,
}

impl Leader {
    pub(super) fn of(entry: &TermEntry) -> Leader {
        Leader {
            term: entry.term,
            identity: entry.identity.clone(),
            since: SystemTime::UNIX_EPOCH + Duration::from_millis(entry.since_ms),
        }
    }
}

/// The record of the election `name`.
pub(super) async fn read(client: &Client, name: &str) -> Result<Record, Error> {
    let keys = LockKeys::new(&client.config().key_prefix, name)?;
    let id = client.new_request_id();
    let call = CurrentCall {
        keys: &keys,
        id: id.as_bytes(),
    };
    client.call(Operation::Acquire, name, &call).await
}
