//! Release notifications: one shared RESP3 subscriber connection per client.
//!
//! A waiter subscribes to the lock's release channel before it retries, so a release between
//! its failed attempt and its wait is never missed: every message bumps a per-channel
//! generation, and a waiter sleeps only until the generation moves past the one it saw before
//! its attempt (or until the holder's remaining ttl, because a crashed holder never publishes).
//! A channel is unsubscribed when its last waiter leaves, so `PUBSUB CHANNELS` is empty at rest.
//!
//! Within one client, waiters for the same lock take turns in FIFO order: only the waiter at
//! the head retries when the lock is released, so a release costs one attempt per process
//! instead of one per waiting task, and a task that releases and immediately asks again queues
//! behind the tasks already waiting instead of barging in front of them.
//!
//! In a cluster, the server ends a sharded subscription itself when the channel's slot moves to
//! another shard or its master becomes a replica in a failover (`SUNSUBSCRIBE` push), and a
//! killed master takes its subscriptions with it (a disconnection): a channel that still has
//! waiters is subscribed again on the slot's master now (a keyed read first, whose `MOVED` or
//! failure refreshes the client's slot map), retried until a master serves the slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch, OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::backend::{Backend, Subscriber};
use crate::background::Background;
use crate::error::{is_connection_failure, Error, Operation};
use crate::sync;

type ChannelMap = HashMap<Vec<u8>, Arc<Channel>>;

struct Channel {
    generation: watch::Sender<u64>,
    /// One permit: the waiter holding it is the one that retries.
    turn: Arc<Semaphore>,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE for this channel and counts its waiters.
    state: tokio::sync::Mutex<ChannelState>,
}

#[derive(Default)]
struct ChannelState {
    waiters: usize,
    subscribed: bool,
    retired: bool,
}

/// The subscriber side of one client.
pub(crate) struct Waiters {
    backend: Arc<Backend>,
    connect_timeout: Duration,
    response_timeout: Duration,
    conn: OnceCell<Subscriber>,
    channels: Arc<Mutex<ChannelMap>>,
    background: Background,
}

impl Waiters {
    pub(crate) fn new(
        backend: Arc<Backend>,
        connect_timeout: Duration,
        response_timeout: Duration,
        background: Background,
    ) -> Self {
        Waiters {
            backend,
            connect_timeout,
            response_timeout,
            conn: OnceCell::new(),
            channels: Arc::default(),
            background,
        }
    }

    async fn connection(&self, key: &str) -> Result<Subscriber, Error> {
        let make = async {
            let channels = self.channels.clone();
            let (dropped, dropped_rx) = mpsc::unbounded_channel();
            let pushes = move |push: PushInfo| {
                dispatch(&channels, push, &dropped);
                Ok::<(), std::convert::Infallible>(())
            };
            let conn = self
                .backend
                .subscriber(pushes)
                .await
                .map_err(|e| subscribe_error(key, e))?;
            // Lives as long as the client's runtime (not a counted cleanup task).
            let resubscribing = resubscribe(dropped_rx, conn.clone(), self.channels.clone());
            drop(self.background.handle().spawn(resubscribing));
            Ok(conn)
        };
        // Made with the client's runtime current: the subscriber connection lives there.
        let init = self.background.enter(self.conn.get_or_try_init(|| make));
        let conn = tokio::time::timeout(self.connect_timeout, init)
            .await
            .map_err(|_| Error::Timeout {
                op: Operation::Subscribe,
                key: key.to_owned(),
                after: self.connect_timeout,
            })??;
        Ok(conn.clone())
    }

    /// Subscribes to `channel` (if no one in this client already is) and returns the waiter's
    /// handle. The subscription is confirmed by Redis when this returns.
    pub(crate) async fn subscribe(&self, channel: &str, key: &str) -> Result<Subscription, Error> {
        let conn = self.connection(key).await?;
        loop {
            let entry = {
                let mut map = sync::lock(&self.channels);
                map.entry(channel.as_bytes().to_vec())
                    .or_insert_with(|| {
                        Arc::new(Channel {
                            generation: watch::Sender::new(0),
                            turn: Arc::new(Semaphore::new(1)),
                            state: tokio::sync::Mutex::new(ChannelState::default()),
                        })
                    })
                    .clone()
            };
            let mut state = entry.state.lock().await;
            if state.retired {
                continue; // removed from the map while we waited; take the fresh entry
            }
            state.waiters += 1;
            // From here on, dropping this future (or an error) gives the waiter back.
            let sub = Subscription {
                rx: entry.generation.subscribe(),
                entry: entry.clone(),
                channels: self.channels.clone(),
                conn: conn.clone(),
                name: channel.as_bytes().to_vec(),
                background: self.background.clone(),
                turn: None,
            };
            if !state.subscribed {
                // Set before the SUBSCRIBE is sent: if this future is dropped (or fails) once
                // it may have reached Redis, the waiter's departure still unsubscribes (an
                // UNSUBSCRIBE of a channel never subscribed is harmless).
                state.subscribed = true;
                let timeout = || Error::Timeout {
                    op: Operation::Subscribe,
                    key: key.to_owned(),
                    after: self.response_timeout,
                };
                let subscribe = || {
                    let mut conn = conn.clone();
                    let timeout = self.response_timeout;
                    let background = self.background.clone();
                    async move {
                        let subscribe = async move { conn.subscribe(channel.as_bytes()).await };
                        tokio::time::timeout(timeout, background.enter(subscribe)).await
                    }
                };
                let subscribed = async {
                    match subscribe().await.map_err(|_| timeout())? {
                        // The subscriber connection dropped since its last use; it reconnects.
                        Err(e) if is_connection_failure(&e) => {
                            tracing::debug!(error = %e, "subscribe failed on a dropped connection; retrying");
                            subscribe()
                                .await
                                .map_err(|_| timeout())?
                                .map_err(|e| subscribe_error(key, e))
                        }
                        other => other.map_err(|e| subscribe_error(key, e)),
                    }
                };
                if let Err(error) = subscribed.await {
                    // The next waiter subscribes afresh (this one's departure unsubscribes).
                    state.subscribed = false;
                    return Err(error);
                }
            }
            drop(state);
            return Ok(sub);
        }
    }

    /// True if some task of this client is waiting for `channel`'s lock.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        sync::lock(&self.channels).contains_key(channel.as_bytes())
    }

    /// Channels with at least one waiter (for tests and diagnostics).
    pub(crate) fn active_channels(&self) -> usize {
        sync::lock(&self.channels).len()
    }
}

fn subscribe_error(key: &str, source: redis::RedisError) -> Error {
    Error::Redis {
        op: Operation::Subscribe,
        key: key.to_owned(),
        source,
    }
}

fn dispatch(channels: &Mutex<ChannelMap>, push: PushInfo, dropped: &DroppedTx) {
    let map = sync::lock(channels);
    match push.kind {
        // The server's own (a moved slot, a master turned replica) or the answer to a waiter's
        // departure: `resubscribe` tells them apart by the channel's state.
        PushKind::SUnsubscribe => {
            if let Some(Value::BulkString(name)) = push.data.first() {
                if map.contains_key(name.as_slice()) {
                    let _ = dropped.send(Dropped::Channel(name.clone()));
                }
            }
        }
        PushKind::Disconnection if !map.is_empty() => {
            let _ = dropped.send(Dropped::All);
        }
        _ => {}
    }
    match push.kind {
        // A release message; or a (re)subscription confirmed, which after a reconnect means
        // releases published while the connection was down were missed: look again. Sharded
        // (a cluster) or not; a sharded channel is also unsubscribed by the server when its
        // slot moves to another shard (the client subscribes again there): look again too.
        PushKind::Message
        | PushKind::Subscribe
        | PushKind::SMessage
        | PushKind::SSubscribe
        | PushKind::SUnsubscribe => {
            if let Some(Value::BulkString(name)) = push.data.first() {
                if let Some(entry) = map.get(name.as_slice()) {
                    entry.generation.send_modify(|g| *g += 1);
                }
            }
        }
        // Messages may have been missed while disconnected: make every waiter look again.
        PushKind::Disconnection => {
            for entry in map.values() {
                entry.generation.send_modify(|g| *g += 1);
            }
        }
        _ => {}
    }
}

/// Subscriptions that may have ended while their channels had waiters.
enum Dropped {
    /// The server ended this channel's sharded subscription.
    Channel(Vec<u8>),
    /// A connection of the subscriber dropped (in a cluster: maybe its node died).
    All,
}

type DroppedTx = mpsc::UnboundedSender<Dropped>;

/// Subscribes again to the channels in `dropped` (a cluster's sharded subscriptions; one
/// server's connection manager resubscribes by itself after a reconnect), each in a task of
/// its own that retries until it succeeds or the channel no longer needs it.
async fn resubscribe(
    mut dropped: mpsc::UnboundedReceiver<Dropped>,
    conn: Subscriber,
    channels: Arc<Mutex<ChannelMap>>,
) {
    while let Some(dropped) = dropped.recv().await {
        let names: Vec<Vec<u8>> = match dropped {
            Dropped::Channel(name) => vec![name],
            Dropped::All if conn.is_cluster() => sync::lock(&channels).keys().cloned().collect(),
            Dropped::All => continue,
        };
        for name in names {
            tokio::spawn(resubscribe_one(conn.clone(), channels.clone(), name));
        }
    }
}

/// After subscribing again, how long to wait before each confirming subscription (see
/// `resubscribe_one`).
const CONFIRM_AFTER: [Duration; 2] = [Duration::from_millis(200), Duration::from_secs(1)];

/// Subscribes to `name` again while it is meant to be subscribed (it has waiters and no
/// departure is unsubscribing it: a departure holds the channel's state while it unsubscribes,
/// and leaves it unsubscribed), retrying with a growing pause (a failover may take a while to
/// promote a replica; meanwhile waiters fall back to the holder's lease). The new
/// subscription's confirmation makes the waiters look again, so a release published while no
/// shard had the subscription is not missed.
async fn resubscribe_one(mut conn: Subscriber, channels: Arc<Mutex<ChannelMap>>, name: Vec<u8>) {
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(entry) = sync::lock(&channels).get(&name).cloned() else {
            return;
        };
        {
            let state = entry.state.lock().await;
            if !state.subscribed || state.waiters == 0 || state.retired {
                return;
            }
            tracing::debug!(
                "sharded subscription lost (slot moved, failover or disconnect); subscribing again"
            );
            // After a failover the old master (now a replica) would accept the subscription
            // but never see the releases: route by a fresh slot map first. (Best effort: if
            // the read is refused, subscribe where the old map says.)
            let _ = conn.follow_slot(&name).await;
            match conn.subscribe(&name).await {
                Ok(()) => {
                    drop(state);
                    // The redirect above refreshes the client's slot map in the background:
                    // the subscription may still have gone to the old master. Subscribing
                    // again once the map is fresh puts it on the slot's master (a second
                    // subscription on one node changes nothing; one left on the old master
                    // only delivers a harmless extra wake-up).
                    for settle in CONFIRM_AFTER {
                        tokio::time::sleep(settle).await;
                        let Some(entry) = sync::lock(&channels).get(&name).cloned() else {
                            return;
                        };
                        // Held while subscribing, as above: a departure cannot unsubscribe
                        // in between and be undone.
                        let state = entry.state.lock().await;
                        if !state.subscribed || state.waiters == 0 || state.retired {
                            return;
                        }
                        let _ = conn.follow_slot(&name).await;
                        let _ = conn.subscribe(&name).await;
                    }
                    return;
                }
                Err(error) => {
                    tracing::debug!(%error, "subscribing again failed; retrying (waiters fall back to the holder's lease meanwhile)")
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// One waiter's interest in a release channel; dropping it gives the interest back.
pub(crate) struct Subscription {
    rx: watch::Receiver<u64>,
    entry: Arc<Channel>,
    channels: Arc<Mutex<ChannelMap>>,
    conn: Subscriber,
    name: Vec<u8>,
    background: Background,
    /// Held while this waiter is at the head of the queue; dropped with the subscription.
    turn: Option<OwnedSemaphorePermit>,
}

impl Subscription {
    /// Waits (FIFO) until this waiter is the one to retry, or `deadline`; false on timeout.
    pub(crate) async fn take_turn(&mut self, deadline: Instant) -> bool {
        if self.turn.is_none() {
            let turn = self.entry.turn.clone().acquire_owned();
            // The semaphore is never closed.
            self.turn = tokio::time::timeout_at(deadline, turn)
                .await
                .ok()
                .and_then(Result::ok);
        }
        self.turn.is_some()
    }

    /// Call before each attempt: later messages wake [`Subscription::wait_until`].
    pub(crate) fn mark_seen(&mut self) {
        self.rx.borrow_and_update();
    }

    /// Waits for a release message published after the last [`Subscription::mark_seen`],
    /// or until `deadline`.
    pub(crate) async fn wait_until(&mut self, deadline: Instant) {
        let _ = tokio::time::timeout_at(deadline, self.rx.changed()).await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Hand the turn to the next waiter now, not after the unsubscribe bookkeeping.
        self.turn = None;
        let entry = self.entry.clone();
        let channels = self.channels.clone();
        let mut conn = self.conn.clone();
        let name = std::mem::take(&mut self.name);
        let leave = async move {
            let mut state = entry.state.lock().await;
            state.waiters -= 1;
            if state.waiters > 0 {
                return;
            }
            if state.subscribed {
                if let Err(error) = conn.unsubscribe(&name[..]).await {
                    tracing::debug!(%error, "unsubscribe failed; the server drops it on reconnect");
                }
                state.subscribed = false;
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
