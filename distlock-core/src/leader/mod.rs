//! Leader election with terms: campaign, lead, resign, observe — one more kind of hold.
//!
//! A leader is the holder of the name's lock, taken `fenced`, renewed, and waited for in turn:
//! candidates queue in Redis (first come, first elected, across processes) and a leader's
//! step-down hands the lock to the next candidate at once. Each leader proclaims its **term**
//! (a record next to the lock: term, identity, since), which is its fencing token: strictly
//! greater than every earlier term of the name, so a store written through
//! [`fence`](mod@crate::fence) with [`Leadership::fence`] refuses a deposed leader's writes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock_core::Error> {
//! use std::time::Duration;
//!
//! // Runs the scheduler while this process leads; campaigns again if leadership is lost.
//! distlock_core::leader("scheduler")
//!     .ttl(Duration::from_secs(5))
//!     .identity("http://10.0.0.7:8080")
//!     .run(|leadership| async move {
//!         // ... schedule jobs, writing through distlock::fence with leadership.fence() ...
//!         leadership.resign().await // hand over at once (or keep leading: never return)
//!     })
//!     .await??;
//! # Ok(()) }
//! ```
//!
//! # What is promised
//!
//! * **One leader believes at a time.** While [`Leadership::ensure_held`] says `Ok` (and
//!   [`Leadership::lost`] has not resolved), no other candidate has been elected: leadership
//!   is the lock's lease, with its margin, and is given up (`lost`) before the lease could run
//!   out. [`LeaderBuilder::run`] cancels its body at that moment, before any other candidate
//!   can be elected, and campaigns again.
//! * **Terms rise.** Each term is above every earlier term of the name (the fence floor is
//!   raised to it; a term that would not be is moved above the last one written), so
//!   observers never see a term go back, and a fenced store refuses a deposed leader.
//! * **Turns.** Candidates are elected in the order they started campaigning (one server,
//!   Sentinel, Cluster: the lock's queue and handoff; RedLock: its masters' queue). A leader that
//!   resigns (or whose [`Leadership`] is dropped) hands over within one handoff; one that dies
//!   is replaced when its lease runs out (its ttl).
//! * **Observers see every term, in order.** [`LeaderBuilder::observe`] is woken by each new
//!   term (and by each release) through the lock's release channel, reads the record, and
//!   yields every term it has not yet yielded (the record keeps the last
//!   [`TERMS_KEPT`](crate::scripts::TERMS_KEPT)), oldest first, and `None` when there is no
//!   leader; a leader that died is noticed when its lease runs out.
//!
//! # What is not
//!
//! * Leadership is a lease: a leader paused past it (a GC pause, `SIGSTOP`) still believes it
//!   leads until it runs again and checks. Write through [`fence`](mod@crate::fence) with its
//!   term, and the stores refuse it.
//! * **The record is kept a retention.** A name's record (the last terms, who leads) expires
//!   [`Config::fence_retention`](crate::Config::fence_retention) (at least the election's
//!   ttl) after its last leader wrote it (a leader renews it every third of that). A name
//!   elected again after that starts a new record: its terms still rise (they are fencing
//!   tokens: the server's clock, above the fence floor while it lives), but an observer that
//!   missed the gap sees no earlier terms.
//! * The deployment's limits are the lock's: asynchronous replication can lose the lock (and
//!   so elect a second leader) in a failover unless [`LeaderBuilder::min_replicas`] replicas
//!   acknowledged it; RedLock holds while a majority of masters does.

mod leadership;
mod observe;
mod record;

use std::time::Duration;

use tokio::time::Instant;

use crate::client::identity::process_identity;
use crate::client::Client;
use crate::error::{Error, LossReason};
use crate::lock::backoff::Backoff;
use crate::lock::builder::{lock, LockBuilder};

/// A term of [`LeaderBuilder::run`] lost sooner than this after its election is followed by a
/// pause before the next campaign (15 ms, doubling to 200 ms while terms keep ending this
/// soon).
const QUICK_LOSS: Duration = Duration::from_secs(1);

pub use leadership::Leadership;
pub use record::Leader;

/// Builds a leader election of one name; start with [`crate::leader()`] or [`Client::leader`].
#[derive(Debug, Clone)]
#[must_use = "a LeaderBuilder does nothing until `.campaign()`, `.run(..)`, `.observe()` or `.current()`"]
pub struct LeaderBuilder {
    lock: LockBuilder,
    identity: Option<String>,
}

/// Starts building the leader election `name` through the default client (see
/// [`crate::init`]).
pub fn leader(name: impl Into<String>) -> LeaderBuilder {
    LeaderBuilder {
        lock: lock(name),
        identity: None,
    }
}

impl Client {
    /// Starts building the leader election `name` through this client.
    pub fn leader(&self, name: impl Into<String>) -> LeaderBuilder {
        LeaderBuilder {
            lock: self.lock(name),
            identity: None,
        }
    }
}

impl LeaderBuilder {
    /// The leadership's lease ([`LockBuilder::ttl`]): a leader that dies is replaced this long
    /// after its last renewal at most; renewed every third of it. Default: the client's.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lock = self.lock.ttl(ttl);
        self
    }

    /// Replicas that must acknowledge the election and each renewal
    /// ([`LockBuilder::min_replicas`]): a failover then does not elect a second leader.
    pub fn min_replicas(mut self, replicas: usize) -> Self {
        self.lock = self.lock.min_replicas(replicas);
        self
    }

    /// What followers see of this candidate once elected ([`Leader::identity`]), for
    /// example its own URL. Default: `host/pid program`, as the `distlock` CLI shows holders.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// Through the client installed as `name` ([`LockBuilder::client`]).
    pub fn client(mut self, name: impl Into<String>) -> Self {
        self.lock = self.lock.client(name);
        self
    }

    /// Waits, in turn with the other candidates, until elected; then proclaims the term and
    /// returns the [`Leadership`] (renewed until resigned, dropped or lost).
    ///
    /// Transient failures are retried for as long as it takes; fails only with what cannot
    /// pass by waiting (no client installed, a key of another kind under the name, an invalid
    /// option).
    pub async fn campaign(self) -> Result<Leadership, Error> {
        leadership::campaign(self.lock, self.identity.unwrap_or_else(process_identity)).await
    }

    /// Campaigns, runs `body` as leader, and returns what it returns. If leadership can no
    /// longer be guaranteed while it runs, the body is cancelled (dropped at its next
    /// `.await`) before any other candidate can be elected, and the candidate campaigns
    /// again with a fresh call of `body` (after a short pause when the term lasted under a
    /// second: a server that elects but then refuses renewals is not hammered).
    ///
    /// The body owns its [`Leadership`]: [`Leadership::resign`] hands over at once; returning
    /// without resigning releases it the same way (in the background).
    pub async fn run<F, Fut>(self, mut body: F) -> Result<Fut::Output, Error>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: std::future::Future,
    {
        let mut backoff = Backoff::default();
        loop {
            let leadership = self.clone().campaign().await?;
            let elected = Instant::now();
            let lost = leadership.lost();
            // Inside the election lock's frame, as `LockBuilder::run`'s body: `fence()` gives
            // the term, and taking the name again re-enters.
            let reason = {
                let mut in_frame = std::pin::pin!(leadership.frame().around(body(leadership)));
                // Loss first, on every poll: after a stall past the lease both are ready, and
                // the body must not take another step (as `LockBuilder::run`'s session).
                let reason = tokio::select! {
                    biased;
                    reason = lost => reason,
                    out = &mut in_frame => return Ok(out),
                };
                if reason == LossReason::Released {
                    // The body let its leadership go itself (resigned, or dropped its
                    // `Leadership`): it knows, and runs to its end as a follower.
                    return Ok(in_frame.await);
                }
                reason
                // The body is dropped here, before anything else happens.
            };
            tracing::warn!(name = %self.lock.name(), %reason, "leadership lost; campaigning again");
            // Terms lost as soon as won (a server that takes the election but refuses its
            // renewals): a pause before each new campaign, growing while it lasts.
            let now = Instant::now();
            if now - elected < QUICK_LOSS {
                tokio::time::sleep_until(backoff.next(now, now + QUICK_LOSS)).await;
            } else {
                backoff.reset();
            }
        }
    }

    /// The leaders of this name as they change, pushed: the current one first (`None`
    /// without one), then every new term in order, and `None` whenever there is no leader.
    /// Not `async`: the stream subscribes when first polled. It ends only if the client
    /// cannot be found (none installed under the builder's name), or if Redis refuses the
    /// client's user what observing needs (an ACL: the release channel's subscription or the
    /// record's read fails with [`Error::PermissionDenied`]; see the `distlock` crate docs,
    /// "Least privilege"); other failures are retried.
    pub fn observe(&self) -> impl futures_util::Stream<Item = Option<Leader>> + Send + 'static {
        observe::stream(self.lock.clone())
    }

    /// The current leader, in one look (`None` without one).
    pub async fn current(&self) -> Result<Option<Leader>, Error> {
        let client = self.lock.resolve()?;
        let record = record::read(&client, self.lock.name()).await?;
        Ok(record.leader.as_ref().map(Leader::of))
    }
}
