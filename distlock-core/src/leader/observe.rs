//! Followers' view of an election: a stream of leaders, pushed through the lock's release
//! channel (each new term publishes a wake there, as each release does).
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

struct Observer {
    lock: LockBuilder,
    client: Option<Client>,
    subscription: Option<Subscription>,
    /// The highest term yielded.
    last_term: u64,
    /// The last item yielded named a leader (a `None` follows when it goes).
    leading: bool,
    /// Nothing yielded yet: the first look yields the current state, not the history.
    first: bool,
    pending: VecDeque<Option<Leader>>,
    /// When to look again without a message.
    next_look: Instant,
    /// The pauses between failed looks.
    backoff: Backoff,
}

pub(super) fn stream(lock: LockBuilder) -> impl Stream<Item = Option<Leader>> + Send + 'static {
    let observer = Observer {
        lock,
        client: None,
        subscription: None,
        last_term: 0,
        leading: false,
        first: true,
        pending: VecDeque::new(),
        next_look: Instant::now(),
        backoff: Backoff::default(),
    };
    stream::unfold(observer, |mut o| async move {
        let item = o.next().await?;
        Some((item, o))
    })
}

impl Observer {
    /// The next item; `None` ends the stream (no such client).
    async fn next(&mut self) -> Option<Option<Leader>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if !self.first {
                if let Some(sub) = self.subscription.as_mut() {
                    sub.wait_until(self.next_look, 0).await;
                }
            }
            match self.look().await {
                Ok(()) => self.backoff.reset(),
                Err(Failure::NoClient | Failure::Refused) => return None,
                Err(Failure::Transient) => {
                    let now = Instant::now();
                    let again = self.backoff.next(now, now + LOOK_AGAIN);
                    tokio::time::sleep_until(again).await;
                }
            }
        }
    }

    /// Subscribes (once), reads the record and queues what changed.
    async fn look(&mut self) -> Result<(), Failure> {
        let client = match &self.client {
            Some(client) => client.clone(),
            None => {
                let client = self.lock.resolve().map_err(|_| Failure::NoClient)?;
                self.client = Some(client.clone());
                client
            }
        };
        let name = self.lock.name().to_owned();
        if self.subscription.is_none() {
            let keys =
                LockKeys::new(&client.config().key_prefix, &name).map_err(|_| Failure::NoClient)?;
            let sub = client.subscribe(keys.channel(), &name).await?;
            self.subscription = Some(sub);
        }
        if let Some(sub) = self.subscription.as_mut() {
            sub.mark_seen();
        }
        let record = read(&client, &name).await?;
        self.queue(&record);
        self.next_look = Instant::now()
            + match (&record.leader, u64::try_from(record.pttl)) {
                (Some(_), Ok(pttl)) => Duration::from_millis(pttl).min(LOOK_AGAIN) + PAST_LEASE,
                _ => LOOK_AGAIN,
            };
        Ok(())
    }

    /// Queues every term above the last one yielded, oldest first (the current state only, on
    /// the first look), and `None` when the leader yielded last is gone.
    fn queue(&mut self, record: &Record) {
        let current = record.leader.as_ref();
        if self.first {
            self.first = false;
            self.last_term = record.terms.first().map_or(0, |t| t.term);
            if let Some(leader) = current {
                self.last_term = self.last_term.max(leader.term);
            }
            self.leading = current.is_some();
            self.pending.push_back(current.map(Leader::of));
            return;
        }
        for entry in record.terms.iter().rev() {
            if entry.term > self.last_term {
                self.last_term = entry.term;
                self.leading = true;
                self.pending.push_back(Some(Leader::of(entry)));
            }
        }
        if let Some(leader) = current {
            if leader.term > self.last_term {
                self.last_term = leader.term;
                self.leading = true;
                self.pending.push_back(Some(Leader::of(leader)));
            }
        }
        let still_leading = current.is_some_and(|l| l.term == self.last_term);
        if self.leading && !still_leading {
            self.leading = false;
            self.pending.push_back(None);
        }
    }
}

enum Failure {
    /// No client under the builder's name: the stream ends.
    NoClient,
    /// Redis refused the client's user what observing needs (an ACL: the subscription or the
    /// read failed with `Error::PermissionDenied`): no retry mends it, the stream ends.
    Refused,
    /// Try again after a pause.
    Transient,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        match error {
            Error::PermissionDenied { .. } => Failure::Refused,
            _ => Failure::Transient,
        }
    }
}
