//! The candidates of an election in line (Curator's participants): the leader, then every
//! candidate waiting, in the order they will be elected, each with what it said it is.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::client::Client;
use crate::error::{Error, Operation};
use crate::wire::calls::{CandidateCall, CandidatesCall, Line};
use crate::wire::keys::LockKeys;

/// One candidate of an election ([`LeaderBuilder::candidates`](super::LeaderBuilder::candidates)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// What it said it is ([`LeaderBuilder::identity`](super::LeaderBuilder::identity));
    /// `None` for a waiter that did not say (a client that is not campaigning through
    /// `distlock::leader`, taking the name's lock).
    pub identity: Option<String>,
    /// Its client's id (`d2:<hex>`, as the `distlock` CLI shows owners): one per client.
    pub client: String,
    /// True for the leader (always first).
    pub leading: bool,
}

/// The line of the election `keys` names: the leader (the lock's holder) first, then the
/// waiters in arrival order.
pub(super) async fn line(client: &Client, keys: &LockKeys) -> Result<Vec<Candidate>, Error> {
    let id = client.new_request_id();
    let call = CandidatesCall {
        keys,
        id: id.as_bytes(),
    };
    let line = client.call(Operation::Acquire, keys.name(), &call).await?;
    Ok(of(&line))
}

/// The candidates a [`Line`] names.
fn of(line: &Line) -> Vec<Candidate> {
    let candidate = |value: &str, leading: bool| {
        let client = client_of(value).to_owned();
        let identity = line
            .identities
            .iter()
            .find(|(id, _)| *id == client)
            .map(|(_, identity)| identity.clone());
        Candidate {
            identity,
            client,
            leading,
        }
    };
    let holder = (!line.holder.is_empty()).then(|| candidate(&line.holder, true));
    holder
        .into_iter()
        .chain(line.queue.iter().map(|value| candidate(value, false)))
        .collect()
}

/// The client id of a lock value (`d2:<client>:<n>` → `d2:<client>`).
fn client_of(value: &str) -> &str {
    value.rsplit_once(':').map_or(value, |(client, _)| client)
}

/// This client's entry among an election's candidates while it campaigns and leads: written at
/// once, refreshed by a task on the client's runtime every third of `keep`, removed (in the
/// background) when dropped.
pub(super) struct Candidacy {
    client: Client,
    keys: Arc<LockKeys>,
    keep: Duration,
    refresh: AbortHandle,
}

impl Candidacy {
    pub(super) fn enter(client: &Client, keys: LockKeys, identity: String, keep: Duration) -> Self {
        let keys = Arc::new(keys);
        let refresh = client.spawn_task({
            let (client, keys) = (client.clone(), keys.clone());
            async move {
                loop {
                    if let Err(error) = write(&client, &keys, Some(&identity), keep).await {
                        tracing::debug!(name = %keys.name(), %error, "a candidate's entry not written; trying again next period");
                    }
                    tokio::time::sleep(keep / 3).await;
                }
            }
        });
        Candidacy {
            client: client.clone(),
            keys,
            keep,
            refresh,
        }
    }
}

impl Drop for Candidacy {
    fn drop(&mut self) {
        self.refresh.abort();
        let (client, keys, keep) = (self.client.clone(), self.keys.clone(), self.keep);
        self.client.spawn_cleanup(async move {
            let _ = write(&client, &keys, None, keep).await;
        });
    }
}

/// Writes (or, `None`, removes) this client's entry.
async fn write(
    client: &Client,
    keys: &LockKeys,
    identity: Option<&str>,
    keep: Duration,
) -> Result<(), Error> {
    let id = client.new_request_id();
    let call = CandidateCall {
        keys,
        id: id.as_bytes(),
        client: client.owner_prefix(),
        identity,
        keep,
    };
    client.call(Operation::Acquire, keys.name(), &call).await
}
