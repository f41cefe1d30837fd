//! One waiter's interest in a lock's release channel (`Subscription`): its FIFO turn among the
//! client's waiters, the wakes it has seen, a grant handed to it by a release, its place in the
//! client's cohort; dropping it gives all of that back (and unsubscribes with the last waiter).
//! The part that never speaks to Redis is an [`Interest`] of its own, which the concurrency
//! checks drive (`checks`).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::time::Instant;

use crate::background::Background;
use crate::client::waiting::channel::{Channel, ChannelMap, Subscribers, DEGRADED_POLL};
use crate::client::waiting::cohort::{self, Deferral, Grant, GrantSlot, Membership};
use crate::sync::atomic::Ordering;
use crate::sync::{self, mutant, time, Mutex};
use crate::wire::calls::NextWaiter;
use crate::wire::scripts::TURN_GRACE;
/// One waiter's interest in a release channel; dropping it gives the interest back, and the
/// last waiter's departure unsubscribes. Its client-side part is its [`Interest`].
pub(crate) struct Subscription {
    pub(super) interest: Interest,
    pub(super) channels: Arc<Mutex<ChannelMap>>,
    pub(super) conns: Subscribers,
    pub(super) name: Vec<u8>,
    pub(super) background: Background,
    pub(super) response_timeout: Duration,
}

impl Deref for Subscription {
    type Target = Interest;

    fn deref(&self) -> &Interest {
        &self.interest
    }
}

impl DerefMut for Subscription {
    fn deref_mut(&mut self) -> &mut Interest {
        &mut self.interest
    }
}

/// A waiter's interest in a channel, inside the client: its turn, the wakes it saw, the grant
/// a release hands it, its place in the cohort. Dropped, it gives all of that back.
pub(crate) struct Interest {
    pub(super) rx: watch::Receiver<Box<[u64]>>,
    /// The counts at the last [`Interest::mark_seen`].
    pub(super) seen: Box<[u64]>,
    /// Masters that must have been heard from since then to wake this waiter.
    pub(super) wake_after: usize,
    pub(super) entry: Arc<Channel>,
    /// Held while this waiter is at the head of the queue; dropped with the subscription.
    pub(super) turn: Option<OwnedSemaphorePermit>,
    /// A waiter to whom a release may hand the lock: its lock value and where the grant lands.
    pub(super) grant: Option<(Vec<u8>, Arc<GrantSlot>)>,
    /// Such a waiter's place in the client's cohort of the lock (see `cohort`).
    pub(super) membership: Membership,
    /// Such a waiter took the lock (its release carries the cohort on).
    pub(super) took: bool,
}

impl Interest {
    /// A new waiter of the channel `entry` (counted in it by the caller), woken by messages
    /// from `wake_after` masters.
    pub(super) fn new(entry: Arc<Channel>, wake_after: usize) -> Self {
        let rx = entry.heard.subscribe();
        let seen = rx.borrow().clone();
        Interest {
            rx,
            seen,
            wake_after,
            entry,
            turn: None,
            grant: None,
            membership: Membership::Outside,
            took: false,
        }
    }

    /// Waits (FIFO) until this waiter is the one to retry, or `deadline`; false on timeout.
    pub(crate) async fn take_turn(&mut self, deadline: Instant) -> bool {
        if mutant!(TurnBarges) {
            return true;
        }
        if self.turn.is_none() {
            let turn = self.entry.turn.clone().acquire_owned();
            // The semaphore is never closed.
            self.turn = time::timeout_at(deadline, turn)
                .await
                .ok()
                .and_then(Result::ok);
        }
        self.turn.is_some()
    }

    /// Makes this a waiter to whom a release may hand the lock (a plain lock's waiter on one
    /// server, Sentinel or a cluster, queued in Redis: see `lock::wait_loop`): a message naming
    /// `value` then ends [`Interest::wait_grant`] as granted. Call before the attempt
    /// that queues it, so no grant can come first.
    pub(crate) fn expect_grant(&mut self, value: &[u8]) {
        let slot = Arc::new(GrantSlot::default());
        sync::lock(&self.entry.grants).insert(value.to_vec(), slot.clone());
        self.grant = Some((value.to_vec(), slot));
    }

    /// A waiter of [`Interest::expect_grant`] (`next`: its value and ticket) waits in the
    /// client for a release of this client to queue it, if another waiter of this client is
    /// queued for the lock or waits so already (see `cohort`): true if it does (it sends no
    /// attempt until [`Interest::wait_grant`] ends without a grant).
    pub(crate) fn defer(&mut self, next: NextWaiter) -> bool {
        let Some((_, slot)) = &self.grant else {
            return false;
        };
        match cohort::defer(&self.entry.cohort, next, slot) {
            Some(membership) => {
                self.membership = membership;
                true
            }
            None => false,
        }
    }

    /// A deferred waiter (see [`Interest::defer`]), as its queue entry sees it.
    pub(crate) fn deferral(&self) -> Option<Deferral> {
        Deferral::new(&self.entry.cohort, &self.membership)
    }

    /// A waiter of [`Interest::expect_grant`] is queued in Redis by an attempt of its own.
    pub(crate) fn queued(&mut self) {
        cohort::queued(&self.entry.cohort, &mut self.membership);
    }

    /// A deferred waiter (see [`Interest::defer`]) that a release of this client queued:
    /// when that release was made, and the client's switch epoch then.
    pub(crate) fn carried(&self) -> Option<(Instant, u64)> {
        cohort::carried(&self.membership)
    }

    /// The waiter took the lock (or was handed it).
    pub(crate) fn took(&mut self) {
        self.took = true;
    }

    /// A waiter of [`Interest::expect_grant`]: waits until a release hands it the lock
    /// (`Some`: the grant, naming the request that queued the waiter), or a plain wake (a
    /// release without a waiter to hand it to, a resubscription) came after the last
    /// [`Interest::mark_seen`], or it is to queue itself (a deferred waiter promoted, see
    /// `cohort`), or `deadline` (`None`).
    pub(crate) async fn wait_grant(&mut self, deadline: Instant) -> Option<Grant> {
        let Some(slot) = self.grant.as_ref().map(|(_, slot)| slot.clone()) else {
            self.wait_until(deadline, 0).await;
            return None;
        };
        let deadline = self.poll_deadline(deadline);
        let granted = |slot: &GrantSlot| sync::lock(&slot.grant).take();
        loop {
            if let Some(grant) = granted(&slot) {
                return Some(grant);
            }
            if slot.promoted.swap(false, Ordering::AcqRel) {
                return None;
            }
            let woken = {
                let heard = self.rx.borrow_and_update();
                heard.iter().zip(&*self.seen).any(|(n, seen)| n != seen)
            };
            if woken {
                return None;
            }
            // Biased: each branch only makes the loop look again, and a fixed order lets a
            // concurrency check replay it.
            tokio::select! {
                biased;
                () = slot.notify.notified() => {}
                changed = time::timeout_at(deadline, self.rx.changed()) => {
                    if !matches!(changed, Ok(Ok(()))) {
                        return granted(&slot);
                    }
                }
            }
        }
    }

    /// `deadline`, or sooner (`DEGRADED_POLL`) while the subscription reached too few masters
    /// for their messages to wake this waiter (or is not known to be confirmed).
    fn poll_deadline(&self, deadline: Instant) -> Instant {
        if self.entry.confirmed.load(Ordering::Acquire) < self.wake_after {
            deadline.min(time::now() + DEGRADED_POLL)
        } else {
            deadline
        }
    }

    /// Call before each attempt: later messages wake [`Interest::wait_until`].
    pub(crate) fn mark_seen(&mut self) {
        self.seen.copy_from_slice(&self.rx.borrow_and_update());
    }

    /// Waits for a release message published after the last [`Interest::mark_seen`]
    /// (over a RedLock quorum: from enough masters, see the module docs), or until `deadline`
    /// (sooner, every `DEGRADED_POLL`, if too few masters took the subscription).
    ///
    /// RedLock: the first `pass` wakes go to the waiters queued ahead of this one (each takes
    /// its turn after a release); after each, this one waits at most `TURN_GRACE` more, in
    /// case a waiter ahead left the queue (its turn then comes without a release).
    pub(crate) async fn wait_until(&mut self, deadline: Instant, mut pass: u32) {
        if mutant!(BaselineAfterAttempt) {
            self.mark_seen();
        }
        let mut deadline = self.poll_deadline(deadline);
        loop {
            let heard_from = {
                let heard = self.rx.borrow_and_update();
                heard
                    .iter()
                    .zip(&*self.seen)
                    .filter(|(n, seen)| n != seen)
                    .count()
            };
            if heard_from >= self.wake_after {
                if pass == 0 {
                    return;
                }
                pass -= 1;
                self.mark_seen();
                deadline = deadline.min(time::now() + TURN_GRACE);
                continue;
            }
            // (The sender lives in `entry`, as long as this receiver: `changed` does not fail.)
            if !matches!(
                time::timeout_at(deadline, self.rx.changed()).await,
                Ok(Ok(()))
            ) {
                return;
            }
        }
    }
}

impl Interest {
    /// Gives the interest back (once; again, it does nothing): the turn to the next waiter,
    /// the grant slot, the place in the cohort.
    pub(super) fn give_back(&mut self) {
        match self.turn.take() {
            Some(turn) if mutant!(TurnKeptOnDrop) => turn.forget(),
            turn => drop(turn),
        }
        if let Some((value, slot)) = self.grant.take() {
            let mut grants = sync::lock(&self.entry.grants);
            if grants.get(&value).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                grants.remove(&value);
            }
        }
        cohort::leave(
            &self.entry.cohort,
            std::mem::take(&mut self.membership),
            self.took,
        );
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Hand the turn to the next waiter now, not after the unsubscribe bookkeeping.
        self.interest.give_back();
        let entry = &self.interest.entry;
        // Not the last waiter (the common case under contention): counted out here, without
        // a task.
        if let Ok(mut state) = entry.state.try_lock() {
            if state.waiters > 1 {
                state.waiters -= 1;
                return;
            }
        }
        let entry = entry.clone();
        let channels = self.channels.clone();
        let conns = self.conns.clone();
        let name = std::mem::take(&mut self.name);
        let timeout = self.response_timeout;
        let leave = async move {
            let mut state = entry.state.lock().await;
            state.waiters -= 1;
            if state.waiters > 0 {
                return;
            }
            if state.subscribed {
                // Over a quorum, where it was confirmed (a master that is down is not waited
                // for); one confirmed later undoes itself (see `subscribe_masters`).
                let which = {
                    let mut on = sync::lock(&entry.on);
                    on.left = true;
                    std::mem::take(&mut on.masters)
                };
                unsubscribe(&conns, &which, &name, timeout).await;
                state.subscribed = false;
                entry.confirmed.store(0, Ordering::Release);
            }
            state.retired = true;
            let mut map = sync::lock(&channels);
            if map.get(&name).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
                map.remove(&name);
            }
        };
        self.background.spawn(leave);
    }
}

/// Unsubscribes from `name` on the subscriber, or on the masters of a RedLock quorum that
/// confirmed it (`which`) at once, each bounded by `timeout` (a master that is down lost the subscription with its connection;
/// should the subscriber reconnect to it later, it subscribes again to what that master last
/// confirmed, and such a stale channel only delivers harmless extra wake-ups).
async fn unsubscribe(conns: &Subscribers, which: &[bool], name: &[u8], timeout: Duration) {
    if let [conn] = &conns[..] {
        if let Err(error) = conn.clone().unsubscribe(name).await {
            tracing::debug!(%error, "unsubscribe failed; the server drops it on reconnect");
        }
        return;
    }
    let confirmed = conns.iter().zip(which).filter(|(_, &on)| on);
    let each = confirmed.map(|(conn, _)| {
        let mut conn = conn.clone();
        async move { tokio::time::timeout(timeout, conn.unsubscribe(name)).await }
    });
    for result in futures_util::future::join_all(each).await {
        let error = match result {
            Ok(Ok(())) => continue,
            Ok(Err(error)) => error.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        tracing::debug!(%error, "unsubscribe on a RedLock master failed (down?)");
    }
}
