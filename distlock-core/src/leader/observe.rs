//! Followers' view of an election: a stream of what changed, pushed through the lock's release
//! channel (each new term, each new identity and each release publishes a wake there).
//!
//! The observer subscribes through its client (one subscription per channel and client,
//! whatever the deployment: Sentinel's master, a cluster's shard, every RedLock master), reads
//! the record, yields what changed, and waits for the next message — or for the leader's lease
//! to run out, since a leader that dies publishes nothing.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::stream::{self, Stream};
use tokio::time::Instant;

use crate::client::waiting::subscription::Subscription;
use crate::client::Client;
use crate::error::Error;
use crate::lock::backoff::Backoff;
use crate::lock::builder::LockBuilder;
use crate::wire::calls::Record;
use crate::wire::keys::LockKeys;

use super::record::{read, Leader};

/// Looks again at least this often without a message (a message lost with a connection).
const LOOK_AGAIN: Duration = Duration::from_secs(30);

/// After a leader's lease should have run out, the look that finds it gone.
const PAST_LEASE: Duration = Duration::from_millis(50);

/// What an observer of an election sees ([`LeaderBuilder::observe`](super::LeaderBuilder::observe)):
/// the present, the history it missed, and the gaps in what it knows, told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Observed {
    /// The leader now: a new term, the term leading when the stream started, or the same term
    /// showing a new identity ([`Leadership::proclaim`](super::Leadership::proclaim)). Its
    /// [`Leader::lease_until`] says when it is replaced at the latest if it died.
    Leader(Leader),
    /// A term that began and ended between two looks of this observer (or, resuming with
    /// [`LeaderBuilder::observe_from`](super::LeaderBuilder::observe_from), one it had not
    /// seen): history, not the present, yielded oldest first, before the present.
    Past(Leader),
    /// No leader now: the last one resigned, died or lost its term, and no other is elected yet.
    Vacant,
    /// Terms after `after` (the last term this observer knew) may have been missed: the record
    /// no longer reaches back to it — more than [`TERMS_KEPT`](crate::scripts::TERMS_KEPT)
    /// terms passed between two looks, or the record expired or was deleted meanwhile. What
    /// follows is every term the record still has.
    Gap {
        /// The last term this observer knew before the gap.
        after: u64,
    },
}

impl Observed {
    /// The leader now, if this says there is one (`None` for history, a gap, or no leader).
    pub fn leader(&self) -> Option<&Leader> {
        match self {
            Observed::Leader(leader) => Some(leader),
            _ => None,
        }
    }
}

struct Observer {
    lock: LockBuilder,
    client: Option<Client>,
    subscription: Option<Subscription>,
    /// The highest term yielded (or resumed from).
    last_term: u64,
    /// The present last yielded: the leader's term and identity, `None` for no leader; `None`
    /// before the first look too (`first`).
    present: Option<(u64, String)>,
    /// Nothing yielded yet: the first look yields the current state (and, resuming, the terms
    /// after `last_term` as history).
    first: bool,
    /// Resumed from a term: the first look replays what came after it.
    resumed: bool,
    pending: VecDeque<Observed>,
    /// When to look again without a message.
    next_look: Instant,
    /// The pauses between failed looks.
    backoff: Backoff,
}

pub(super) fn stream(
    lock: LockBuilder,
    from: Option<u64>,
) -> impl Stream<Item = Result<Observed, Error>> + Send + 'static {
    let observer = Observer {
        lock,
        client: None,
        subscription: None,
        last_term: from.unwrap_or(0),
        present: None,
        first: true,
        resumed: from.is_some(),
        pending: VecDeque::new(),
        next_look: Instant::now(),
        backoff: Backoff::default(),
    };
    stream::unfold(Some(observer), |state| async move {
        let mut o = state?;
        match o.next().await {
            Ok(item) => Some((Ok(item), Some(o))),
            // The error is the stream's last item.
            Err(error) => Some((Err(error), None)),
        }
    })
}

impl Observer {
    /// The next item, or the error that ends the stream.
    async fn next(&mut self) -> Result<Observed, Error> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Ok(item);
            }
            if !self.first {
                if let Some(sub) = self.subscription.as_mut() {
                    sub.wait_until(self.next_look, 0).await;
                }
            }
            match self.look().await {
                Ok(()) => self.backoff.reset(),
                Err(error) if ends_the_stream(&error) => return Err(error),
                Err(_) => {
                    let now = Instant::now();
                    let again = self.backoff.next(now, now + LOOK_AGAIN);
                    tokio::time::sleep_until(again).await;
                }
            }
        }
    }

    /// Subscribes (once), reads the record and queues what changed.
    async fn look(&mut self) -> Result<(), Error> {
        let client = match &self.client {
            Some(client) => client.clone(),
            None => {
                let client = self.lock.resolve()?;
                self.client = Some(client.clone());
                client
            }
        };
        let name = self.lock.name().to_owned();
        if self.subscription.is_none() {
            let keys = LockKeys::new(&client.config().key_prefix, &name)?;
            let sub = client.subscribe(keys.channel(), &name).await?;
            self.subscription = Some(sub);
        }
        if let Some(sub) = self.subscription.as_mut() {
            sub.mark_seen();
        }
        let (record, read_at) = read(&client, &name).await?;
        self.queue(&record, read_at);
        // Without a message (one lost with a connection): a leader is looked for again when its
        // lease should have run out, and without one every election ttl, so a term whose wake
        // was missed is seen within a ttl.
        let ttl = self.lock.ttl_in(client.config());
        self.next_look = Instant::now()
            + match (&record.leader, u64::try_from(record.pttl)) {
                (Some(_), Ok(pttl)) => Duration::from_millis(pttl).min(LOOK_AGAIN) + PAST_LEASE,
                _ => ttl.min(LOOK_AGAIN),
            };
        Ok(())
    }

    /// Queues what changed since the last look: a gap if the record no longer reaches back to
    /// the last term known, every term after it that is not the present as history (oldest
    /// first; none on a first look that does not resume), then the present if it changed.
    fn queue(&mut self, record: &Record, read_at: Instant) {
        let current = Leader::current(record, read_at);
        let replay = !self.first || self.resumed;
        if replay && self.last_term > 0 {
            let newer = record.terms.iter().any(|t| t.term > self.last_term);
            let reaches_back = record.terms.iter().any(|t| t.term <= self.last_term);
            if newer && !reaches_back {
                self.pending.push_back(Observed::Gap {
                    after: self.last_term,
                });
            }
        }
        for entry in record.terms.iter().rev() {
            if entry.term <= self.last_term {
                continue;
            }
            self.last_term = entry.term;
            let is_current = current.as_ref().is_some_and(|c| c.term == entry.term);
            if replay && !is_current {
                self.pending.push_back(Observed::Past(Leader::of(entry)));
            }
        }
        let present = current.as_ref().map(|c| (c.term, c.identity.clone()));
        if let Some(leader) = &current {
            self.last_term = self.last_term.max(leader.term);
        }
        // The present, whenever it differs from the last one yielded (a term below the last
        // one known too: an observer never goes silent while a leader exists).
        if self.first || present != self.present {
            self.pending.push_back(match current {
                Some(leader) => Observed::Leader(leader),
                None => Observed::Vacant,
            });
        }
        self.present = present;
        self.first = false;
    }
}

/// What no retry mends: no client under the builder's name, an invalid name, or Redis refusing
/// the client's user what observing needs (an ACL).
fn ends_the_stream(error: &Error) -> bool {
    matches!(
        error,
        Error::NotInitialized
            | Error::UnknownClient { .. }
            | Error::InvalidKey { .. }
            | Error::PermissionDenied { .. }
    )
}
