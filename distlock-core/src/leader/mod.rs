//! Leader election with terms: campaign, lead, resign, observe — a layer above the locks, not
//! a kind of hold of its own: a fenced lock of the name plus a term record next to it.
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
//! What etcd's `concurrency.Election`, client-go's `leaderelection` and Curator's
//! `LeaderSelector` users look for, and where it is: `Campaign` / `Resign` are
//! [`LeaderBuilder::campaign`] and [`Leadership::resign`]; `Proclaim` is
//! [`Leadership::proclaim`]; `Observe` (from a revision) is [`LeaderBuilder::observe`]
//! ([`LeaderBuilder::observe_from`]); `Leader` is [`LeaderBuilder::current`], with the
//! leader's lease ([`Leader::lease_until`]); `OnStartedLeading` / `OnStoppedLeading` are
//! [`LeaderBuilder::run`]'s body and [`LeaderBuilder::on_lost`]; `IsLeader` is
//! [`Leadership::is_leader`] and, for code that does not own the leadership,
//! [`LeaderWatch`]; the `HealthzAdaptor` is [`LeaderHealth`]; Curator's `autoRequeue` is
//! [`LeaderBuilder::serve`] and its participants [`LeaderBuilder::candidates`].
//!
//! # What is promised
//!
//! * **One leader believes at a time.** While [`Leadership::ensure_held`] says `Ok` (and
//!   [`Leadership::lost`] has not resolved), no other candidate has been elected: leadership
//!   is the lock's lease, with its margin, and is given up (`lost`) before the lease could run
//!   out. [`LeaderBuilder::run`] cancels its body at that moment, before any other candidate
//!   can be elected — the loss is looked at first on every poll, so a body is never polled
//!   again once its term is lost, even after a stall past the lease — and campaigns again.
//! * **Belief ends when the term ends.** A resign (or a dropped [`Leadership`]) ends belief
//!   before its release is sent: every [`Leadership::lost`] and [`LeaderWatch`] of the term
//!   says [`LossReason::Released`] before the next candidate
//!   can be elected.
//! * **Terms never go back.** Each term is above every earlier term of the name: it is the
//!   election's fencing token (the server's clock in µs, above the fence floor), moved above
//!   the last term recorded and above the highest term this process has seen of the name
//!   when it is not. The record and the fence floor are written together and kept while the
//!   leader leads (renewed every third of the retention) and a retention after; over RedLock a
//!   term counts only once a majority of masters wrote that very term (a second round writes
//!   the largest term any master asked for on every master), so a later majority, which shares
//!   a master with it, elects above it even if the master that held the highest term is gone.
//!   So terms rise across a leaderless gap longer than the retention, a server clock stepped
//!   back, the record and floor deleted by hand, and a RedLock master lost — each alone, and
//!   any two of them as long as one process that saw the last term campaigns or observes (see
//!   "What is not" for what still breaks it).
//! * **Turns.** Candidates are elected in the order they started campaigning (one server,
//!   Sentinel, Cluster: the lock's queue and handoff; RedLock: its masters' queue). A leader that
//!   resigns (or whose [`Leadership`] is dropped) hands over within one handoff; one that dies
//!   is replaced when its lease runs out (its ttl).
//! * **Observers tell the present from history.** [`LeaderBuilder::observe`] is woken by each
//!   new term, identity and release through the lock's release channel (and looks again when
//!   the leader's lease should have run out, since a leader that died publishes nothing, and
//!   every election ttl while there is no leader, so a wake lost with a connection costs a ttl
//!   at most), reads the
//!   record, and yields the present ([`Observed::Leader`], [`Observed::Vacant`]) whenever it
//!   changes — a leader is shown even if its term is below one seen before, so an observer never
//!   goes silent while a leader exists — with the terms that began and ended between two looks
//!   as [`Observed::Past`], oldest first, and [`Observed::Gap`] when the record no longer
//!   reaches back to the last term seen (it keeps the last
//!   [`TERMS_KEPT`](crate::scripts::TERMS_KEPT)). Over RedLock it shows only terms a majority
//!   of masters recorded: a proclaim that reached a minority elected nobody. The leader it
//!   shows ([`LeaderBuilder::current`] too) is the one a majority's records name, holding the
//!   lock, **with one term**: the term its proclaim counted and it fences with. A record of
//!   the same leader ahead of that term on a minority (a master that answered the proclaim
//!   after the call's timeout had written a term of its own, and a proclaim never lowers its
//!   own record) is never shown; while the masters that answer disagree on the leader's term
//!   and none still out could settle it (one of the term's majority down, another ahead), no
//!   leader is shown.
//! * **Failovers, with every replica.** With [`LeaderBuilder::min_replicas`] covering every
//!   replica a failover may promote ([`ALL_REPLICAS`](crate::ALL_REPLICAS) over Sentinel), the
//!   election, the term's record and every renewal are acknowledged by the replicas before they
//!   count: a failover that promotes one of those replicas finds the leader's lock and term
//!   there, so it elects no second leader and no lower term. `WAIT` is not consensus
//!   ([`Config::min_replicas`](crate::Config::min_replicas)): a replica that had not
//!   acknowledged (one disconnected from the master, which `ALL_REPLICAS` no longer counts) can
//!   still be promoted, and then what follows for `min_replicas` 0 applies.
//!
//! # What is not
//!
//! * Leadership is a lease: a leader paused past it (a GC pause, `SIGSTOP`) still believes it
//!   leads until it runs again and checks. Write through [`fence`](mod@crate::fence) with its
//!   term (and [`claim`](crate::fence::redis::FencedStore::claim) the store when elected), and
//!   the stores refuse it.
//! * **A Sentinel failover with `min_replicas` 0 can elect a second leader while the first
//!   still believes it leads.** The first keeps renewing on the old master, which acknowledges
//!   until Sentinel demotes it, while the promoted replica's copy of its lock runs out (a ttl
//!   after the last renewal that reached it) and another candidate is elected there. The first
//!   is told as soon as its client hears of the switch from the sentinel it listens to (the
//!   announcement, or its answer every 500 ms) and confirms its lease on the new master
//!   (`Expired`, `Stolen`, or `Unreachable` while the old master is gone): two leaders can
//!   believe at once for at most 0.5 s plus one response timeout after the sentinels name the
//!   new master. Terms still rise (the new master's clock, above the last term seen by the
//!   candidates and observers), so a store written through [`fence`](mod@crate::fence) refuses
//!   the deposed leader. Measured with ttl 1 s (reliability row 24f): told 15–480 ms after the
//!   naming, never after the next leader's first `Ok`. With every replica (above), no renewal
//!   the promoted replica lacks counts, and a new leader is elected on the new master within
//!   ttl + 1 s of its naming (its replicas must be listed first; the campaign waits out the
//!   elections too few replicas acknowledge meanwhile).
//! * **A step forward of the server's clock** expires the leader's lock early (Redis keeps
//!   expiry as a wall-clock date), and another candidate can be elected at once. The leader is
//!   told at its client's next server check ([`Config::server_check`](crate::Config::server_check),
//!   250 ms) plus a round trip: measured (row 24c, +60 s), told 2–157 ms after the step. A
//!   step back changes nothing a leader or an observer sees: a term minted on a clock behind
//!   the last one is lifted above it.
//! * **What still breaks the terms**: the servers' memory of the name gone (no leader for
//!   longer than the retention, a server restarted without persistence, or the keys deleted)
//!   **and** their clock behind the clock that made the last term **and** no process that saw
//!   the last term campaigning or observing. An operator moves a name forward by raising its
//!   fence floor above the last term (`SET <prefix>:{<name>}:fence <term>`; the next term is
//!   above it); while the name has a leader, `distlock show <name>` shows its term and the
//!   floor (the `fence` row; `GET <prefix>:{<name>}:fence` reads it at any time).
//! * **The record is kept a retention.** A name's record (the last terms, who leads) and its
//!   fence floor expire [`Config::fence_retention`](crate::Config::fence_retention) (at least
//!   the election's ttl) after its last leader wrote them (a leader renews both every third of
//!   that). A name elected again after that starts a new record: its terms still rise (see
//!   above), and an observer that missed the gap is told ([`Observed::Gap`]).
//! * RedLock holds while a majority of masters does.

mod candidates;
mod health;
mod leadership;
mod memory;
mod observe;
mod record;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::identity::process_identity;
use crate::client::Client;
use crate::error::{Error, LossReason};
use crate::lock::backoff::Backoff;
use crate::lock::builder::{lock, LockBuilder};

use leadership::{Campaign, Lent};

/// Lets go of a `Leadership` its body gave back ([`Lent`]) once dropped: after the body (which is
/// dropped first, being declared after it).
struct LetGo(Lent);

impl Drop for LetGo {
    fn drop(&mut self) {
        drop(crate::sync::lock(&self.0).take());
    }
}

/// A term of [`LeaderBuilder::run`] (or [`LeaderBuilder::serve`]) lost sooner than this after
/// its election is followed by a pause before the next campaign (15 ms, doubling to 200 ms
/// while terms keep ending this soon).
const QUICK_LOSS: Duration = Duration::from_secs(1);

pub use candidates::Candidate;
pub use health::{LeaderHealth, Overdue};
pub use leadership::Leadership;
pub use observe::Observed;
pub use record::Leader;
pub use watch::LeaderWatch;

/// What [`LeaderBuilder::on_lost`] is called with: a term of this process lost while its body
/// ran (the body was cancelled).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lost {
    /// The election.
    pub name: String,
    /// The term lost.
    pub term: u64,
    /// Why.
    pub reason: LossReason,
}

type OnLost = Arc<dyn Fn(&Lost) + Send + Sync>;

/// Builds a leader election of one name; start with [`crate::leader()`] or [`Client::leader`].
#[derive(Clone)]
#[must_use = "a LeaderBuilder does nothing until `.campaign()`, `.run(..)`, `.serve(..)`, `.observe()` or `.current()`"]
pub struct LeaderBuilder {
    lock: LockBuilder,
    identity: Option<String>,
    health: Option<LeaderHealth>,
    on_lost: Option<OnLost>,
}

impl fmt::Debug for LeaderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderBuilder")
            .field("lock", &self.lock)
            .field("identity", &self.identity)
            .field("health", &self.health)
            .field("on_lost", &self.on_lost.is_some())
            .finish()
    }
}

/// Starts building the leader election `name` through the default client (see
/// [`crate::init`]).
pub fn leader(name: impl Into<String>) -> LeaderBuilder {
    LeaderBuilder::of(lock(name))
}

impl Client {
    /// Starts building the leader election `name` through this client.
    pub fn leader(&self, name: impl Into<String>) -> LeaderBuilder {
        LeaderBuilder::of(self.lock(name))
    }
}

impl LeaderBuilder {
    fn of(lock: LockBuilder) -> Self {
        LeaderBuilder {
            lock,
            identity: None,
            health: None,
            on_lost: None,
        }
    }

    /// The leadership's lease ([`LockBuilder::ttl`]): a leader that dies is replaced this long
    /// after its last renewal at most; renewed every third of it. Default: the client's.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.lock = self.lock.ttl(ttl);
        self
    }

    /// Replicas that must acknowledge the election, its term's record and each renewal
    /// ([`LockBuilder::min_replicas`]): with every replica of a Sentinel master
    /// ([`crate::ALL_REPLICAS`]), a failover promotes a replica that has the election and its
    /// term, so it elects no second leader and no lower term (see the module docs, "What is
    /// promised", for what holds with fewer).
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

    /// Reports every term this builder wins to `health`, the liveness check of a leader that
    /// keeps acting past its lease ([`LeaderHealth`]).
    pub fn health(mut self, health: &LeaderHealth) -> Self {
        self.health = Some(health.clone());
        self
    }

    /// Called when a term is lost while [`LeaderBuilder::run`]'s (or
    /// [`LeaderBuilder::serve`]'s) body runs, right after the body was cancelled and before the
    /// next campaign: how the caller learns of it without a tracing subscriber (a metric, an
    /// alert of its own, a log line in its format). Not called for a term the body resigned.
    pub fn on_lost(mut self, on_lost: impl Fn(&Lost) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(on_lost));
        self
    }

    /// Waits, in turn with the other candidates, until elected; then proclaims the term and
    /// returns the [`Leadership`] (renewed until resigned, dropped or lost).
    ///
    /// Transient failures, and too few replicas acknowledging the election
    /// ([`LeaderBuilder::min_replicas`]: a failover under way, the new master's replicas not
    /// listed yet), are waited out for as long as it takes; fails only with what cannot pass by
    /// waiting (no client installed, a key of another kind under the name, an invalid option).
    /// A term lost before it could be proclaimed is campaigned for again after a pause that
    /// grows while it keeps happening.
    pub async fn campaign(self) -> Result<Leadership, Error> {
        leadership::campaign(Campaign {
            lock: self.lock,
            identity: self.identity.unwrap_or_else(process_identity),
            health: self.health,
        })
        .await
    }

    /// Campaigns, runs `body` as leader, and returns what it returns: **when the body returns,
    /// `run` returns** (its `Leadership`, dropped with the body unless it was resigned, hands
    /// over at once). To stay a candidate for good, use [`LeaderBuilder::serve`].
    ///
    /// If leadership can no longer be guaranteed while the body runs, the body is cancelled
    /// (dropped without being polled again: the loss is looked at first, on every poll) before
    /// any other candidate can be elected, [`LeaderBuilder::on_lost`] is told, and the candidate
    /// campaigns again with a fresh call of `body` (after a short pause when the term lasted
    /// under a second: a server that elects but then refuses renewals is not hammered).
    ///
    /// The body is given its [`Leadership`]: [`Leadership::resign`] hands over at once, and
    /// every [`LeaderWatch`] of the term (and [`crate::ensure_held`] inside the body) says so
    /// from then on; a body that resigned is not cancelled (it chose to step down), and `run`
    /// returns its output when it completes. Dropping the `Leadership` inside the body does not
    /// let go (a body written `|_| work()` still leads while `work()` runs): it goes back to
    /// `run`, which lets go when the body completes or is cancelled. A `Leadership` the body
    /// moves elsewhere (a spawned task) leads until dropped there.
    pub async fn run<F, Fut>(self, mut body: F) -> Result<Fut::Output, Error>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: std::future::Future,
    {
        let mut backoff = Backoff::default();
        loop {
            // The body's `Leadership`, dropped inside the body, comes back here: the lock is let
            // go when the body completes (or is cancelled), not before.
            let back = Lent::default();
            let leadership = self.clone().campaign().await?.lent(back.clone());
            let (elected, term) = (Instant::now(), leadership.term());
            let lost = leadership.lost();
            let _let_go = LetGo(back);
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
            self.lost_term(term, reason);
            pause_after_quick_loss(&mut backoff, elected).await;
        }
    }

    /// Stays a candidate for good: campaigns, runs `body` while elected, and campaigns again
    /// when the body returns (its `Leadership` handed over at once, unless it resigned first)
    /// or when the term is lost (the body cancelled, as in [`LeaderBuilder::run`]); the body's
    /// output is dropped. Curator's `autoRequeue`. Returns only with what no campaign can
    /// mend (no client installed, a key of another kind under the name, an invalid option);
    /// drop the future to stop being a candidate (a term it leads is released then).
    pub async fn serve<F, Fut>(self, mut body: F) -> Error
    where
        F: FnMut(Leadership) -> Fut,
        Fut: std::future::Future,
    {
        let mut backoff = Backoff::default();
        loop {
            let elected = Instant::now();
            let once = self.clone().run(&mut body).await;
            if let Err(error) = once {
                return error;
            }
            // The body returned: a term that lasted under a second is followed by a pause too.
            pause_after_quick_loss(&mut backoff, elected).await;
        }
    }

    /// A lost term: said through tracing and [`LeaderBuilder::on_lost`].
    fn lost_term(&self, term: u64, reason: LossReason) {
        let name = self.lock.name();
        tracing::warn!(name = %name, term, %reason, "leadership lost; campaigning again");
        if let Some(on_lost) = &self.on_lost {
            on_lost(&Lost {
                name: name.to_owned(),
                term,
                reason,
            });
        }
    }

    /// The election as followers see it, pushed: the present first (the leader, or
    /// [`Observed::Vacant`]), then each change — a new leader, a new identity, no leader —
    /// with the terms that began and ended between two looks as [`Observed::Past`], oldest
    /// first, and [`Observed::Gap`] where the record no longer reaches back to the last term
    /// seen. It never goes silent while a leader exists.
    ///
    /// Not `async`: the stream subscribes when first polled. Failures that pass by waiting
    /// are retried; what no retry mends is the stream's last item, an `Err`: no client
    /// installed under the builder's name, an invalid name, or Redis refusing the client's user
    /// what observing needs (an ACL: [`Error::PermissionDenied`]; see the `distlock` crate docs,
    /// "Least privilege").
    pub fn observe(
        &self,
    ) -> impl futures_util::Stream<Item = Result<Observed, Error>> + Send + 'static {
        observe::stream(self.lock.clone(), None)
    }

    /// [`LeaderBuilder::observe`], resumed after `term` (the last term a previous observer
    /// saw, etcd's `Observe` from a revision): the terms after it come first as
    /// [`Observed::Past`] (a [`Observed::Gap`] first if the record no longer reaches back to
    /// `term`), then the present.
    pub fn observe_from(
        &self,
        term: u64,
    ) -> impl futures_util::Stream<Item = Result<Observed, Error>> + Send + 'static {
        observe::stream(self.lock.clone(), Some(term))
    }

    /// The candidates in line (Curator's participants), in one look: the leader first
    /// ([`Candidate::leading`]), then every candidate waiting, in the order they will be
    /// elected (their arrival; over RedLock, those a majority of masters queued), each with
    /// the identity it campaigns with.
    pub async fn candidates(&self) -> Result<Vec<Candidate>, Error> {
        let client = self.lock.resolve()?;
        let keys = crate::wire::keys::LockKeys::new(&client.config().key_prefix, self.lock.name())?;
        candidates::line(&client, &keys).await
    }

    /// The current leader, in one look (`None` without one). Over RedLock, the leader and term
    /// a majority of masters recorded (see the module docs, "Observers tell the present from
    /// history").
    pub async fn current(&self) -> Result<Option<Leader>, Error> {
        let client = self.lock.resolve()?;
        let (record, read_at) = record::read(&client, self.lock.name()).await?;
        Ok(Leader::current(&record, read_at))
    }
}

/// After a term that lasted under [`QUICK_LOSS`] (elected at `elected`), a pause that grows
/// while terms keep ending this soon; after a longer one, none (and the pauses start over).
async fn pause_after_quick_loss(backoff: &mut Backoff, elected: Instant) {
    let now = Instant::now();
    if now - elected < QUICK_LOSS {
        tokio::time::sleep_until(backoff.next(now, now + QUICK_LOSS)).await;
    } else {
        backoff.reset();
    }
}
