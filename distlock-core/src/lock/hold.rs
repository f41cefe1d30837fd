//! One acquisition of a hold of any kind, shared by its outer hold and its re-entries: who
//! holds what (client, keys, value, kind), the count of holds, `min_hold`, and its release in
//! Redis (the kind's release, retried once on a dropped connection; in the background when a
//! cleanup drops it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::client::waiting::cohort::Carry;
use crate::client::{Boxed, Client};
use crate::error::Error;
use crate::lock::backoff::Backoff;
use crate::lock::kind::{Kind, OneOrMany, Target};
use crate::lock::queue_entry::QueueEntry;
use crate::wire::calls::ReleaseCall;
pub(crate) use crate::wire::calls::Released;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;

/// One acquisition of a lock, shared by its outer hold and every re-entrant hold of the same
/// call chain: enough to release it from anywhere. Holds are counted here, on the client; the
/// lock is released in Redis when the last hold lets go.
#[derive(Clone)]
pub(crate) struct Hold(Arc<HoldState>);

pub(crate) struct HoldState {
    pub(crate) client: Client,
    /// Every lock this acquisition holds, in its order: one, or a set's (`lock::kind::set`),
    /// never none. The first is the one named where one is needed (logs, errors).
    keys: OneOrMany<LockKeys>,
    /// The lock's value in Redis (`d2:<owner>`): the owner check of release and renewal.
    pub(crate) value: ShortId,
    /// What this acquisition holds (its requests, release, re-entry rules: `kind`).
    pub(crate) kind: Kind,
    /// `min_hold`: releasing earlier leaves the lock to expire at this instant (set once, by
    /// the outer hold).
    keep_until: OnceLock<Instant>,
    holds: AtomicUsize,
    /// A fenced acquisition's tokens, one per lock of `keys` (set once, by its acquire).
    tokens: OnceLock<Box<[u64]>>,
}

impl std::ops::Deref for Hold {
    type Target = HoldState;

    fn deref(&self) -> &HoldState {
        &self.0
    }
}

impl Hold {
    /// A new acquisition of the locks `keys` (in the hold's order: one, or a set's; at least
    /// one) of `kind`, with one hold.
    pub(crate) fn new(
        client: Client,
        keys: OneOrMany<LockKeys>,
        value: ShortId,
        kind: Kind,
    ) -> Self {
        Hold(Arc::new(HoldState {
            client,
            keys,
            value,
            kind,
            keep_until: OnceLock::new(),
            holds: AtomicUsize::new(1),
            tokens: OnceLock::new(),
        }))
    }

    /// What the kind's requests are about.
    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            client: &self.client,
            keys: &self.keys,
            value: &self.value,
        }
    }

    /// The keys of every lock this hold holds, in its order (one, or a set's).
    pub(crate) fn keys(&self) -> &[LockKeys] {
        &self.keys
    }

    /// The keys of the hold's first lock: its one lock, or the first of its set (what logs and
    /// errors name).
    pub(crate) fn key(&self) -> &LockKeys {
        &self.keys[0]
    }

    /// True if this hold holds the lock `name` (alone or in its set).
    pub(crate) fn covers(&self, name: &str) -> bool {
        self.keys.iter().any(|k| k.name() == name)
    }

    /// Keeps a take's fencing tokens (one per lock of a set, set once; one lock's is its
    /// guard's and frame's, see [`Hold::token_of`]) and returns the first: the guard's.
    pub(crate) fn record_tokens(&self, tokens: Vec<u64>) -> Option<u64> {
        let first = tokens.first().copied();
        if self.keys.len() > 1 && !tokens.is_empty() {
            let _ = self.tokens.set(tokens.into_boxed_slice());
        }
        first
    }

    /// The fencing token of the lock `name` of this hold, as a guard or a body's frame that
    /// carries `own` sees it: `own` where the hold holds that one lock only (a re-entry's is
    /// its outer hold's, a leader's body's is its term), else that lock's own token (each
    /// lock of a fenced set has its own, from its acquire). `None` if the hold does not hold
    /// `name` or holds it without a token.
    pub(crate) fn token_of(&self, name: &str, own: Option<u64>) -> Option<u64> {
        let at = self.keys.iter().position(|k| k.name() == name)?;
        match *self.keys {
            [_] => own,
            _ => self.tokens.get()?.get(at).copied(),
        }
    }

    /// Sets the `min_hold` instant (the first call wins).
    pub(crate) fn keep_until(&self, at: Instant) {
        let _ = self.0.keep_until.set(at);
    }

    /// One more hold of the same acquisition (a re-entry).
    pub(crate) fn enter(&self) -> Hold {
        self.0.holds.fetch_add(1, Ordering::AcqRel);
        self.clone()
    }

    /// One hold lets go; true if it was the last (the lock is to be released in Redis).
    fn leave(&self) -> bool {
        self.0.holds.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Runs the release in Redis; retried once (idempotently) if the connection dropped.
    ///
    /// `ours_until`: until when the lock is known to be ours (the lease deadline), if known.
    /// A retry sent before then that finds the lock gone or taken means the first attempt
    /// freed it (and someone may have taken it since): that release succeeded. Without that
    /// knowledge only "gone" counts as freed by the first attempt.
    pub(crate) async fn release(&self, ours_until: Option<Instant>) -> Result<Released, Error> {
        match self.release_once().await {
            Err(error) if error.is_connection_failure() => {
                tracing::debug!(%error, key = %self.key().name(), "release reply lost; retrying");
                let sent_in_lease = ours_until.is_some_and(|until| Instant::now() < until);
                self.release_once().await.map(|found| match found {
                    Released::Absent => Released::Yes,
                    Released::OtherOwner if sent_in_lease => Released::Yes,
                    other => other,
                })
            }
            other => other,
        }
    }

    /// Runs the release in Redis (`first`: an attempt already sent, whose answer this awaits
    /// first), retrying a transient failure with backoff until `until`. A retry that finds
    /// the lock gone counts as released (the failed attempt may have freed it), and so does
    /// one that finds it another owner's before `ours_until` (until when it was known to be
    /// ours: the lease deadline, if known).
    pub(crate) async fn release_retrying(
        &self,
        mut first: Option<Boxed<Result<Released, Error>>>,
        until: Instant,
        ours_until: Option<Instant>,
    ) -> Result<Released, Error> {
        let mut backoff = Backoff::default();
        let mut retried = false;
        loop {
            let answer = match first.take() {
                Some(sent) => sent.await,
                None => self.release_once().await,
            };
            match answer {
                Ok(Released::Absent) if retried => return Ok(Released::Yes),
                Ok(Released::OtherOwner)
                    if retried && ours_until.is_some_and(|ours| Instant::now() < ours) =>
                {
                    return Ok(Released::Yes)
                }
                Err(error) if error.is_transient() && Instant::now() < until => {
                    tracing::debug!(key = %self.key().name(), %error, "release failed transiently; retrying");
                    retried = true;
                    tokio::time::sleep_until(backoff.next(Instant::now(), until)).await;
                }
                answer => return answer,
            }
        }
    }

    /// How long the lock must still be kept for `min_hold` (zero: release now).
    pub(crate) fn keep(&self) -> Duration {
        self.0.keep_until.get().map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        })
    }

    pub(crate) async fn release_once(&self) -> Result<Released, Error> {
        let mut carried = Carried {
            hold: self,
            next: self.carry_next(),
        };
        let next = carried.next.as_ref().map(Carry::waiter);
        let released = self.kind.release(self.target(), self.keep(), next).await;
        if let Some(next) = carried.next.take() {
            self.carried_answered(next, released.is_ok());
        }
        released
    }

    /// The release that carried `next` (this client's next waiter of the lock) was answered
    /// (`ok`: it queued the waiter; else it failed, and may or may not have): a waiter that
    /// went away meanwhile leaves the queue now, after that release.
    pub(crate) fn carried_answered(&self, next: Carry, ok: bool) {
        let gone = if ok { next.confirm() } else { next.failed() };
        if let Some(gone) = gone {
            drop(QueueEntry::new(
                self.client.clone(),
                vec![self.key().clone()],
                gone.value,
                true,
            ));
        }
    }

    /// This client's next waiter for the lock that waits in the client, for the release to
    /// queue in Redis (see `client::waiting::cohort`), where the kind carries waiters.
    pub(crate) fn carry_next(&self) -> Option<Carry> {
        let carries = self.kind.carries_waiters(&self.client);
        carries.then(|| self.client.carry_next(self.key().channel()))?
    }

    /// The release of this hold with request id `id`, queuing `next`, as one call (`None`
    /// for a set: see [`Kind::release_call`]).
    pub(crate) fn release_call<'a>(
        &'a self,
        id: &'a ShortId,
        next: Option<&Carry>,
    ) -> Option<ReleaseCall<'a>> {
        self.kind
            .release_call(self.target(), id, self.keep(), next.map(Carry::waiter))
    }
}

/// The waiter a release carries, until the release is answered: dropped unanswered (the
/// caller's future went away with the release out), it is settled as a failed release's (a
/// waiter gone meanwhile leaves the queue, where the release may have put it and handed it the
/// lock, after that release on the connection).
struct Carried<'a> {
    hold: &'a Hold,
    next: Option<Carry>,
}

impl Drop for Carried<'_> {
    fn drop(&mut self) {
        if let Some(next) = self.next.take() {
            self.hold.carried_answered(next, false);
        }
    }
}

/// One counted hold that lets go (and, if it is the last, releases the lock in the background)
/// when dropped while armed: the cleanup for cancelled acquires, cancelled releases and guards
/// dropped without `release()`.
pub(crate) struct ReleaseOnDrop {
    hold: Option<Hold>,
    /// This hold has not let go yet (dropping it lets go first).
    counted: bool,
}

impl ReleaseOnDrop {
    pub(crate) fn new(hold: Hold) -> Self {
        ReleaseOnDrop {
            hold: Some(hold),
            counted: true,
        }
    }

    /// Forgets the hold without letting go (its count passes to whoever takes it over).
    pub(crate) fn disarm(&mut self) -> Option<Hold> {
        self.hold.take()
    }

    pub(crate) fn hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }

    /// Lets go of this hold now: true if it was the last one, so the lock is to be released in
    /// Redis (and, until disarmed, dropping this releases it in the background).
    pub(crate) fn leave(&mut self) -> bool {
        if !std::mem::take(&mut self.counted) {
            return false;
        }
        let last = self.hold.as_ref().is_some_and(Hold::leave);
        if !last {
            self.hold = None;
        }
        last
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            if !self.counted || hold.leave() {
                release_later(hold);
            }
        }
    }
}

/// Releases `hold` in a background task on the client's own runtime (so it runs even when the
/// caller's runtime is shutting down). A transient failure is retried with backoff for as
/// long as a caller's runtime shutting down waits for it (connect timeout + 2 × response
/// timeout): the first attempt may fail twice over as its connection goes with a runtime that
/// shuts down (the task sending its group dropped, then the dead driver), before a reconnect.
/// If the client itself is dropped first, or every attempt fails, the lease expires at its ttl.
pub(crate) fn release_later(hold: Hold) {
    let client = hold.client.clone();
    client.spawn_cleanup(async move {
        let until = Instant::now() + hold.client.settle_bound();
        let released = hold.release_retrying(None, until, None).await;
        match released {
            Ok(_) => tracing::debug!(key = %hold.key().name(), "released in background"),
            Err(error) => {
                tracing::warn!(key = %hold.key().name(), %error, "background release failed; the lock expires at its ttl")
            }
        }
    });
}
