//! The guard of a hold of any kind: its token, loss notification, release (awaited, or sent
//! without waiting by `run` and confirmed in the background), and release on drop.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Boxed;
use crate::error::{Error, LossReason};
use crate::fence::Fence;
use crate::lease::{millis_ceil, Lease};
use crate::lock::hold::{release_later, Hold, ReleaseOnDrop, Released};
use crate::wire::keys::LockKeys;

/// The answer of a release already queued (in the group commit).
type SentAnswer = Boxed<Result<Released, Error>>;

/// A release sent without waiting ([`LockGuard::send_release`]): its answer (`first`, when it
/// was queued in the group commit; else its first attempt, sent by the first poll on the
/// caller's thread), awaited on the client's runtime.
///
/// A transient failure (a dropped connection, a timeout, `READONLY`, ...) is retried, with
/// pauses, until the lease's end: past it the lock is Redis's to expire (its ttl ends no
/// later than the lease plus the safety margin), so the lock is never held longer than its
/// lease for want of a release. A retry after a failed attempt that finds the lock gone, or
/// another owner's while the lease still ran, counts as released: the failed attempt may
/// have freed it. What it found goes to tracing (`release sent by run ...`) and to
/// `distlock_sent_releases_total`; the caller's result was decided before (see `lock::run`).
async fn confirm_sent(hold: Hold, lease: Arc<Lease>, first: Option<SentAnswer>) {
    let until = lease.deadline();
    let found = hold.release_retrying(first, until, Some(until)).await;
    let key = hold.key().name();
    match found {
        Ok(found) => match lost_at_release(found) {
            None => sent_release_confirmed(&hold, &lease),
            Some(reason) => {
                tracing::warn!(key = %key, %reason, "release sent by run found the lock no longer ours (run had returned Ok: the body completed inside its lease)");
                lease.held().sent_release(Ok(Some(reason)));
            }
        },
        Err(error) => {
            tracing::warn!(key = %key, %error, "release sent by run failed; the lock expires at its ttl");
            lease.held().sent_release(Err(()));
        }
    }
}

/// A release sent by `run` found the lock ours and released it.
fn sent_release_confirmed(hold: &Hold, lease: &Lease) {
    tracing::debug!(key = %hold.key().name(), "release sent by run confirmed");
    lease.held().sent_release(Ok(None));
}

/// The loss a release reveals: the lock was found gone or another owner's.
fn lost_at_release(found: Released) -> Option<LossReason> {
    match found {
        Released::Yes => None,
        Released::Absent => Some(LossReason::Expired),
        Released::OtherOwner | Released::Incompatible => Some(LossReason::Stolen),
    }
}

/// A held lock. Release it with [`LockGuard::release`]; dropping it releases in the background.
///
/// Renewal (if enabled) stops the moment the guard is released or dropped.
pub struct LockGuard {
    cleanup: ReleaseOnDrop,
    token: Option<u64>,
    /// Which of the hold's locks this guard is about (its index in the hold's keys): a lock of
    /// a set re-entered alone names that lock; otherwise 0, one lock or the set's first.
    named: usize,
    reentry: bool,
    lease: Arc<Lease>,
    /// The watchdog's id for this lease, while it is being renewed.
    renewal: Option<u64>,
    /// A set's: the watchdog's ids of its other locks (empty for one lock).
    renewals: Vec<u64>,
    acquired_at: Instant,
}

/// What an acquire hands to a new [`LockGuard`].
pub(crate) struct Acquisition {
    pub(crate) hold: Hold,
    pub(crate) token: Option<u64>,
    pub(crate) reentry: bool,
    pub(crate) lease: Arc<Lease>,
    pub(crate) renewal: Option<u64>,
    /// A set's: the watchdog's ids of its other locks.
    pub(crate) renewals: Vec<u64>,
    pub(crate) acquired_at: Instant,
}

impl LockGuard {
    pub(crate) fn new(a: Acquisition) -> Self {
        LockGuard {
            cleanup: ReleaseOnDrop::new(a.hold),
            token: a.token,
            named: 0,
            reentry: a.reentry,
            lease: a.lease,
            renewal: a.renewal,
            renewals: a.renewals,
            acquired_at: a.acquired_at,
        }
    }

    /// The hold this guard releases.
    pub(crate) fn hold(&self) -> &Hold {
        self.cleanup
            .hold()
            .expect("a LockGuard holds its lock until release() consumes it")
    }

    /// The lease shared with the watchdog.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The lock's name, as passed to [`crate::lock()`]; for a set taken with
    /// [`crate::lock_all`], its first name ([`LockGuard::names`] lists them all). A lock of a
    /// set re-entered alone (inside the set's body) is named as it was asked for.
    pub fn name(&self) -> &str {
        self.hold().keys()[self.named].name()
    }

    /// This guard as the `named` lock of its hold (its index in the hold's keys): a re-entry
    /// of one lock of a set.
    pub(crate) fn naming(mut self, named: usize) -> Self {
        self.named = named;
        self
    }

    /// Which of the hold's locks this guard is about (see [`LockGuard::naming`]).
    pub(crate) fn named(&self) -> usize {
        self.named
    }

    /// The fencing token, if the lock was taken with [`LockBuilder::fenced`](crate::LockBuilder::fenced):
    /// strictly greater than every token previously handed out for this name while its fence
    /// floor lives (a re-entry shares its outer hold's token). `None` for an unfenced lock.
    /// For a fenced set ([`crate::lock_all`]) the token of its first lock: each lock of a set
    /// has its own ([`LockGuard::token_of`]).
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// The names of every lock this guard holds: the one lock's, or every lock of a set taken
    /// with [`crate::lock_all`] (in the set's order: sorted, duplicates removed; in a Redis
    /// Cluster grouped by hash slot).
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.hold().keys().iter().map(LockKeys::name)
    }

    /// The fencing token of the lock `name` of this guard ([`LockGuard::token`] for one lock;
    /// each lock of a fenced set has its own, from its own fence floor). `None` if the guard
    /// does not hold `name` or was taken without fencing.
    pub fn token_of(&self, name: &str) -> Option<u64> {
        self.hold().token_of(name, self.token)
    }

    /// The [`Fence`](crate::Fence) to write the protected resource with
    /// ([`fence`](mod@crate::fence)): this lock's name and token. `None` when the lock was taken without
    /// [`LockBuilder::fenced`](crate::LockBuilder::fenced). For a set ([`crate::lock_all`])
    /// its first lock's; [`LockGuard::fence_of`] names one.
    pub fn fence(&self) -> Option<Fence> {
        let token = self.token?;
        Some(Fence::new(self.name(), token))
    }

    /// The [`Fence`](crate::Fence) of the lock `name` of this guard: each lock of a fenced set
    /// has its own token. `None` if the guard does not hold `name` or was taken without
    /// fencing.
    pub fn fence_of(&self, name: &str) -> Option<Fence> {
        let token = self.token_of(name)?;
        Some(Fence::new(name, token))
    }

    /// The number of permits of the semaphore this guard holds one of
    /// ([`crate::semaphore`]); `None` for a lock.
    pub fn permits(&self) -> Option<u32> {
        self.hold().kind.permits()
    }

    /// True if this guard holds a shared (read) hold ([`LockBuilder::read`](crate::LockBuilder::read));
    /// false for a lock (also for a read that re-entered a write: it holds the write) or a
    /// permit.
    pub fn is_shared(&self) -> bool {
        self.hold().kind.is_shared()
    }

    /// True if this guard re-entered a lock its call chain already held.
    pub fn is_reentry(&self) -> bool {
        self.reentry
    }

    /// How long ago the lock was acquired.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// Until when the lease is guaranteed, as far as this process knows.
    pub fn guaranteed_until(&self) -> Instant {
        self.lease.deadline()
    }

    /// Why the lock is lost, or `None` while it is still guaranteed.
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.lease.lost_reason()
    }

    /// `Ok(())` while the lock is guaranteed, otherwise [`Error::Lost`]. Call it before an
    /// irreversible step. (A guard that let the lock go is consumed or dropped; what shared its
    /// hold, [`LockGuard::lost`] and a body's [`crate::ensure_held`], then says
    /// [`LossReason::Released`].)
    pub fn ensure_held(&self) -> Result<(), Error> {
        self.lease.ensure_held(self.name())
    }

    /// Resolves when the lock is lost: renewal found it gone or taken, Redis stayed unreachable
    /// until the lease ran out, or (without renewal) the ttl elapsed; or when this guard lets
    /// the lock go ([`LockGuard::release`], or the guard dropped): then with
    /// [`LossReason::Released`], before the release is sent, so before anyone else can be
    /// handed the lock. Never resolves while the lease is guaranteed and the guard holds it.
    /// The future does not borrow the guard: a task given it stops acting on the lock's behalf
    /// when it resolves, whichever way the hold ended.
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        let lease = self.lease.clone();
        async move { lease.lost().await }
    }

    /// Releases this hold (the lock itself when it is the outermost hold) and stops renewal.
    ///
    /// `Ok(())` means the lock was held exclusively from the acquire until this call. Otherwise:
    /// * [`Error::Lost`] if the lease was lost (or ran out) before this call: whatever is still
    ///   ours in Redis is released all the same;
    /// * [`Error::NotOwner`] if Redis found the lock expired or taken over: nothing was changed
    ///   in Redis;
    /// * a network error or [`Error::Timeout`] if Redis could not be asked: the release is
    ///   retried in the background, and the lock expires at its ttl otherwise.
    ///
    /// If this future is dropped before Redis answers, the release finishes in the background.
    pub async fn release(self) -> Result<(), Error> {
        self.start_release().await
    }

    /// [`LockGuard::release`], boxed here and never inlined, so that its state machine is
    /// compiled in this crate only (see `Client::connect`).
    #[inline(never)]
    fn start_release(self) -> Boxed<Result<(), Error>> {
        Box::pin(self.release_here())
    }

    async fn release_here(self) -> Result<(), Error> {
        let key = self.name().to_owned();
        match self.finish().await? {
            Released::Yes => Ok(()),
            Released::OtherOwner | Released::Absent => Err(Error::NotOwner { key }),
            Released::Incompatible => Err(Error::Incompatible { key }),
        }
    }

    /// Releases the hold and reports what Redis found; [`Error::Lost`] when the lease was
    /// already lost before the release was sent (the release still runs). A re-entrant hold
    /// whose outer hold still holds the lock only lets go on the client.
    pub(crate) async fn finish(mut self) -> Result<Released, Error> {
        self.stop_renewal();
        let lost_before = self.lease.lost_reason();
        // Belief ends before the release is sent (and so before the lock can be handed on).
        self.lease.end_belief();
        let hold = self.hold().clone();
        let released = if self.cleanup.leave() {
            let released = hold.release(Some(self.lease.deadline())).await;
            // Answered (either way): nothing left to clean up in the background.
            self.cleanup.disarm();
            released
        } else {
            Ok(Released::Yes)
        };
        if let Some(reason) = released
            .as_ref()
            .ok()
            .and_then(|&found| lost_at_release(found))
        {
            self.lease.held().lost(reason);
        }
        if let Err(error) = &released {
            if error.is_transient() {
                // The release may not have reached Redis; try once more in the background.
                release_later(hold.clone());
            }
        }
        if let Some(reason) = lost_before {
            return Err(Error::Lost {
                // Not `self.name()`: the guard's hold went with its release.
                key: hold.keys()[self.named].name().to_owned(),
                reason,
            });
        }
        let released = released?;
        if released == Released::Yes {
            tracing::debug!(key = %hold.key().name(), held_ms = millis_ceil(self.acquired_at.elapsed()), "released");
        }
        Ok(released)
    }

    /// Releases the hold without waiting for Redis (`run`'s path once its body completed inside
    /// its lease): the release is queued on the command connection (or in the group commit)
    /// before this returns, so it reaches Redis before anything this client sends next; its
    /// answer is awaited on the client's runtime ([`confirm_sent`]). A re-entrant hold whose
    /// outer hold still holds the lock only lets go on the client.
    pub(crate) fn send_release(mut self) {
        self.stop_renewal();
        self.lease.end_belief();
        if !self.cleanup.leave() {
            return;
        }
        let Some(hold) = self.cleanup.disarm() else {
            return;
        };
        let (client, lease) = (hold.client.clone(), self.lease.clone());
        if !client.groups_releases() {
            // Sent by the first poll, on the caller's thread, with the client's runtime
            // entered.
            client.spawn_started(confirm_sent(hold, lease, None));
            return;
        }
        let id = client.new_request_id();
        let next = hold.carry_next();
        let Some(call) = hold.release_call(&id, next.as_ref()) else {
            // A set's release (one call per hash slot), sent by the first poll.
            client.spawn_started(confirm_sent(hold, lease, None));
            return;
        };
        let name = hold.key().name();
        let confirm = {
            let hold = hold.clone();
            move |answer: Result<Released, Error>| match answer {
                // The common case, handled in place by the group's sender: nothing to retry.
                Ok(Released::Yes) => {
                    if let Some(next) = next {
                        hold.carried_answered(next, true);
                    }
                    sent_release_confirmed(&hold, &lease);
                }
                answer => {
                    if let Some(next) = next {
                        hold.carried_answered(next, answer.is_ok());
                    }
                    let first: SentAnswer = Box::pin(std::future::ready(answer));
                    let client = hold.client.clone();
                    client.spawn_cleanup(confirm_sent(hold, lease, Some(first)));
                }
            }
        };
        // Queued in the group commit: its sender runs on the caller's runtime, next to the
        // command connection, and confirms it there.
        if let Err(confirm) = client.queue_release(name, &call, confirm) {
            drop(confirm);
            client.spawn_started(confirm_sent(hold, self.lease.clone(), None));
        }
    }

    fn stop_renewal(&mut self) {
        let ids = self.renewal.take().into_iter();
        let ids = ids.chain(std::mem::take(&mut self.renewals));
        if let Some(hold) = self.cleanup.hold() {
            for id in ids {
                hold.client.stop_renewal(id);
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_renewal();
        // A dropped guard lets go: belief ends before `cleanup` sends the release.
        self.lease.end_belief();
        self.lease.held().end(self.acquired_at);
        // `cleanup` (if still armed) releases in the background as it drops.
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("LockGuard");
        if self.cleanup.hold().is_some() {
            d.field("name", &self.name());
        }
        d.field("token", &self.token)
            .field("reentry", &self.reentry)
            .field("renewing", &self.renewal.is_some())
            .field("lost", &self.lease.lost_reason())
            .finish()
    }
}
