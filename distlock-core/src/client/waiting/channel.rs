//! One release channel's state in a client: the messages heard per master, the FIFO turn of
//! its waiters, its subscription's bookkeeping, the waiters a release may hand the lock to,
//! and their cohort.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

use crate::client::waiting::cohort::{self, GrantSlot};
use crate::deploy::backend::Subscriber;
use crate::sync::atomic::AtomicUsize;
use crate::sync::Mutex;

pub(super) type ChannelMap = HashMap<Vec<u8>, Arc<Channel>>;

/// The subscriber connections: one, or one per master of a RedLock quorum (in the masters'
/// order).
pub(super) type Subscribers = Arc<[Subscriber]>;

/// How often a waiter looks again at a busy lock when its channel's subscription reached too
/// few masters of a RedLock quorum for their messages to wake it (see the module docs), or
/// (one server) is not known to be confirmed because the waiter making it was cancelled.
pub(super) const DEGRADED_POLL: Duration = Duration::from_millis(250);

pub(super) struct Channel {
    /// Messages heard (and subscription confirmations; without a quorum, disconnections too),
    /// one count per master (one in all without a quorum).
    pub(super) heard: watch::Sender<Box<[u64]>>,
    /// Masters that confirmed the subscription (set while the state is held).
    pub(super) confirmed: AtomicUsize,
    /// One permit: the waiter holding it is the one that retries.
    pub(super) turn: Arc<Semaphore>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE for this channel and counts its waiters.
    pub(super) state: tokio::sync::Mutex<ChannelState>,
    /// RedLock: the masters that confirmed the subscription, so that the last waiter's
    /// departure unsubscribes there only (not waiting on masters that are down).
    pub(super) on: Mutex<On>,
    /// The waiters to whom a release may hand the lock, by lock value: a message naming one
    /// is its grant (see `Interest::expect_grant`).
    pub(super) grants: Mutex<HashMap<Vec<u8>, Arc<GrantSlot>>>,
    /// Those waiters as a cohort: the ones waiting in the client for a release of this client
    /// to queue them (see `cohort`).
    pub(super) cohort: cohort::Shared,
}

/// See [`Channel::on`].
#[derive(Default)]
pub(super) struct On {
    pub(super) masters: Vec<bool>,
    /// The last waiter left: a subscription confirmed later is undone at once.
    pub(super) left: bool,
}

#[derive(Default)]
pub(super) struct ChannelState {
    pub(super) waiters: usize,
    pub(super) subscribed: bool,
    pub(super) retired: bool,
}

impl Channel {
    pub(super) fn new(masters: usize) -> Self {
        Channel {
            heard: watch::Sender::new(vec![0; masters].into_boxed_slice()),
            confirmed: AtomicUsize::new(0),
            turn: Arc::new(Semaphore::new(1)),
            state: tokio::sync::Mutex::new(ChannelState::default()),
            on: Mutex::new(On {
                masters: vec![false; masters],
                left: false,
            }),
            grants: Mutex::new(HashMap::new()),
            cohort: cohort::Shared::default(),
        }
    }
}
