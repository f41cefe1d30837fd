//! What followers see of an election: the record next to its lock, read in one call.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Operation};
use crate::wire::calls::{CurrentCall, Record, TermEntry};
use crate::wire::keys::LockKeys;

use super::memory;

/// A leader as followers see it ([`LeaderBuilder::observe`](super::LeaderBuilder::observe),
/// [`LeaderBuilder::current`](super::LeaderBuilder::current)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term: strictly increasing per name, and its fencing token.
    pub term: u64,
    /// What the leader said it is ([`LeaderBuilder::identity`](super::LeaderBuilder::identity),
    /// changed by [`Leadership::proclaim`](super::Leadership::proclaim); by default its host,
    /// process id and program, `host/pid program`).
    pub identity: String,
    /// When the term started, by the Redis server's clock.
    pub since: SystemTime,
    /// When the leader's lease runs out unless it renews it, by this process's clock: the
    /// lock's remaining ttl when the record was read, added to the moment of the read (a
    /// leader that died is replaced then at the latest). `None` for a term of the past
    /// ([`Observed::Past`](super::Observed::Past)).
    pub lease_until: Option<Instant>,
}

impl Leader {
    /// A term of the record's list (history: no lease).
    pub(super) fn of(entry: &TermEntry) -> Leader {
        Leader {
            term: entry.term,
            identity: entry.identity.clone(),
            since: SystemTime::UNIX_EPOCH + Duration::from_millis(entry.since_ms),
            lease_until: None,
        }
    }

    /// The record's leader, if it has one, with its lease as read at `read_at`.
    pub(super) fn current(record: &Record, read_at: Instant) -> Option<Leader> {
        let entry = record.leader.as_ref()?;
        let left = u64::try_from(record.pttl).unwrap_or(0);
        Some(Leader {
            lease_until: Some(read_at + Duration::from_millis(left)),
            ..Leader::of(entry)
        })
    }
}

/// The record of the election `name`, and the moment the read was sent; every term it names is
/// remembered ([`memory`]).
pub(super) async fn read(client: &Client, name: &str) -> Result<(Record, Instant), Error> {
    let keys = LockKeys::new(&client.config().key_prefix, name)?;
    let id = client.new_request_id();
    let call = CurrentCall {
        keys: &keys,
        id: id.as_bytes(),
    };
    let sent_at = Instant::now();
    let record = client.call(Operation::Acquire, name, &call).await?;
    let top = record.terms.iter().map(|t| t.term).max().unwrap_or(0);
    let top = top.max(record.leader.as_ref().map_or(0, |l| l.term));
    memory::saw(&client.config().key_prefix, name, top);
    Ok((record, sent_at))
}
