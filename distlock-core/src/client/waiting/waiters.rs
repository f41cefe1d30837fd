//! Release notifications: one shared RESP3 subscriber connection per client (per master over a
//! RedLock quorum).
//!
//! A waiter subscribes to the lock's release channel before it retries, so a release between
//! its failed attempt and its wait is never missed: every message bumps a per-channel count
//! (one per master), and a waiter sleeps only until the count moves past the one it saw before
//! its attempt (or until the holder's remaining ttl, because a crashed holder never publishes).
//! A channel is unsubscribed when its last waiter leaves, so `PUBSUB CHANNELS` is empty at rest.
//!
//! Within one client, waiters for the same lock take turns in FIFO order: only the waiter at
//! the head retries when the lock is released, so a release costs one attempt per process
//! instead of one per waiting task, and a task that releases and immediately asks again queues
//! behind the tasks already waiting instead of barging in front of them.
//!
//! Over a RedLock quorum (`Config::redlock`) the client keeps one subscriber connection per
//! master (each connecting on first use, so a master that is down costs its response timeout
//! and nothing else) and counts each channel's messages (and subscription confirmations, not
//! disconnections) per master. A waiter retries once messages from `N − majority + 1`
//! different masters arrived since its attempt, where `N` is the number of masters: that many
//! were holding the lock for others when an attempt was busy, and each publishes when its key
//! is released, so a release wakes the waiter; while a holder keeps a majority, at most
//! `N − majority` masters can publish at all (the free ones, whose only publishes are the
//! releases of busy attempts' minority grants), so those never wake anyone and waiters do not
//! storm each other. Waiters of several clients woken by one release retry at once; they do
//! not split the masters between them, because every master grants a free lock only to the
//! waiter that came first (`client/waiting/queue`: a queue per lock on the masters, ordered by the
//! same ticket everywhere), and a client that releases and asks again at once queues behind
//! them: waiters take their turns across clients in arrival order, and a woken waiter retries
//! at once (no random pause). A waiter that the masters told how many waiters are queued ahead
//! of it lets that many wakes pass (each is one of theirs) and retries at its own, looking
//! again at most `TURN_GRACE` after each wake it let pass (one ahead may have left the queue,
//! and its turn then comes without a release). A subscription that reached fewer masters than that (they are down, or
//! refuse it) looks again every `DEGRADED_POLL`, and the next waiter subscribes again; a
//! master that comes back while enough others have the subscription is not needed (the
//! holder's pttl covers a missed release, as it covers a crashed holder). Subscribing returns
//! as soon as enough masters confirmed, and the last waiter's departure unsubscribes only
//! where the subscription was confirmed, so a master that is down holds no waiter up (a
//! confirmation that comes after the departure undoes itself).
//!
//! In a cluster, the server ends a sharded subscription itself when the channel's slot moves to
//! another shard or its master becomes a replica in a failover (`SUNSUBSCRIBE` push), and a
//! killed master takes its subscriptions with it (a disconnection): a channel that still has
//! waiters is subscribed again on the slot's master now (a keyed read first, whose `MOVED` or
//! failure refreshes the client's slot map), retried until a master serves the slot.

use std::sync::Arc;
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, OnceCell};

use crate::background::Background;
use crate::client::waiting::channel::{Channel, ChannelMap, Subscribers};
use crate::client::waiting::cohort::{self, Carry, Grant};
use crate::client::waiting::subscription::{Interest, Subscription};
use crate::deploy::backend::{Backend, Subscriber};
use crate::deploy::redlock::count::majority;
use crate::error::{is_connection_failure, Error, Operation};
use crate::sync::atomic::Ordering;
use crate::sync::{self, mutant, Mutex};
use crate::wire::scripts::VERSION_TAG;
/// The subscriber side of one client.
pub(crate) struct Waiters {
    /// The server (one backend) or the masters of a RedLock quorum.
    masters: Vec<Arc<Backend>>,
    /// Masters whose messages wake a waiter: 1, or `N − majority + 1` over a quorum.
    wake_after: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    conns: OnceCell<Subscribers>,
    channels: Arc<Mutex<ChannelMap>>,
    background: Background,
}

impl Waiters {
    /// The waiters of a client of `masters`: one backend, or every master of a RedLock quorum.
    pub(crate) fn new(
        masters: Vec<Arc<Backend>>,
        connect_timeout: Duration,
        response_timeout: Duration,
        background: Background,
    ) -> Self {
        let n = masters.len();
        Waiters {
            masters,
            wake_after: n - majority(n) + 1,
            connect_timeout,
            response_timeout,
            conns: OnceCell::new(),
            channels: Arc::default(),
            background,
        }
    }

    /// The waiters subscribe on every master of a RedLock quorum (a wake counts only once
    /// enough masters sent it), not on one server.
    fn subscribes_per_master(&self) -> bool {
        self.masters.len() > 1
    }

    async fn connection(&self, key: &str) -> Result<Subscribers, Error> {
        let make = async {
            if self.subscribes_per_master() {
                return self.quorum_connections(key);
            }
            let channels = self.channels.clone();
            let (dropped, dropped_rx) = mpsc::unbounded_channel();
            let pushes = move |push: PushInfo| {
                dispatch(&channels, push, Some(&dropped), 0);
                Ok::<(), std::convert::Infallible>(())
            };
            let conn = self.masters[0]
                .subscriber(pushes)
                .await
                .map_err(|e| subscribe_error(key, e))?;
            // Lives as long as the client's runtime (not a counted cleanup task).
            let resubscribing = resubscribe(dropped_rx, conn.clone(), self.channels.clone());
            drop(self.background.handle().spawn(resubscribing));
            Ok(Subscribers::from([conn]))
        };
        // Made with the client's runtime current: the subscriber connection lives there.
        let init = self.background.enter(self.conns.get_or_try_init(|| make));
        let conn = tokio::time::timeout(self.connect_timeout, init)
            .await
            .map_err(|_| Error::Timeout {
                op: Operation::Subscribe,
                key: key.to_owned(),
                after: self.connect_timeout,
            })??;
        Ok(conn.clone())
    }

    /// One lazily connecting subscriber per master of a RedLock quorum (made with the client's
    /// runtime current), each master's pushes counted as its own.
    fn quorum_connections(&self, key: &str) -> Result<Subscribers, Error> {
        let _entered = self.background.handle().enter();
        let mut conns = Vec::with_capacity(self.masters.len());
        for (master, backend) in self.masters.iter().enumerate() {
            let channels = self.channels.clone();
            let pushes = move |push: PushInfo| {
                dispatch(&channels, push, None, master);
                Ok::<(), std::convert::Infallible>(())
            };
            let conn = backend
                .lazy_subscriber(pushes)
                .map_err(|e| subscribe_error(key, e))?;
            conns.push(conn);
        }
        Ok(conns.into())
    }

    /// Subscribes to `channel` (if no one in this client already is) and returns the waiter's
    /// handle. The subscription is confirmed by Redis when this returns (over a RedLock
    /// quorum: by every master that answered within the response timeout; none answering is
    /// no error, the waiter then looks again every `DEGRADED_POLL`).
    pub(crate) async fn subscribe(&self, channel: &str, key: &str) -> Result<Subscription, Error> {
        let conns = self.connection(key).await?;
        loop {
            let entry = {
                let mut map = sync::lock(&self.channels);
                map.entry(channel.as_bytes().to_vec())
                    .or_insert_with(|| Arc::new(Channel::new(self.masters.len())))
                    .clone()
            };
            let mut state = entry.state.lock().await;
            if state.retired {
                continue; // removed from the map while we waited; take the fresh entry
            }
            state.waiters += 1;
            // From here on, dropping this future (or an error) gives the waiter back.
            let sub = Subscription {
                interest: Interest::new(entry.clone(), self.wake_after),
                channels: self.channels.clone(),
                conns: conns.clone(),
                name: channel.as_bytes().to_vec(),
                background: self.background.clone(),
                response_timeout: self.response_timeout,
            };
            // Not subscribed yet, or on too few masters of a quorum (some were down), or the
            // waiter that subscribed was cancelled before Redis confirmed it: subscribe again.
            let needed =
                !state.subscribed || entry.confirmed.load(Ordering::Acquire) < self.wake_after;
            if needed && self.subscribes_per_master() {
                // Set first, as below: a departure unsubscribes from every master.
                state.subscribed = true;
                self.subscribe_masters(&conns, channel, &entry).await;
            } else if needed {
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
                    let mut conn = conns[0].clone();
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
                entry.confirmed.store(1, Ordering::Release);
            }
            drop(state);
            return Ok(sub);
        }
    }

    /// Subscribes to `channel` on every master of a RedLock quorum at once, each bounded by the
    /// response timeout (a master whose connection dropped since its last use is asked again
    /// within it), and counts the confirmations in `entry.confirmed`. Returns as soon as
    /// enough masters confirmed for their messages to wake a waiter (`wake_after`), or all
    /// answered: a master that is down does not hold every waiter up for its reconnect
    /// attempts. The subscriptions still out finish on the client's runtime (a late
    /// confirmation counts too); the last waiter's departure waits for them before it
    /// unsubscribes.
    async fn subscribe_masters(&self, conns: &Subscribers, channel: &str, entry: &Arc<Channel>) {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let timeout = self.response_timeout;
        let mut each: FuturesUnordered<_> = conns
            .iter()
            .enumerate()
            .map(|(i, conn)| {
                let (conn, name) = (conn.clone(), channel.as_bytes().to_vec());
                // The timer is made inside, on the client's runtime, where the rest may finish.
                self.background.enter(async move {
                    let subscribe = |mut conn: Subscriber, name: Vec<u8>| async move {
                        conn.subscribe(&name).await
                    };
                    let subscribed = async {
                        match subscribe(conn.clone(), name.clone()).await {
                            Err(e) if is_connection_failure(&e) => subscribe(conn, name).await,
                            other => other,
                        }
                    };
                    let ok = matches!(tokio::time::timeout(timeout, subscribed).await, Ok(Ok(())));
                    (i, ok)
                })
            })
            .collect();
        let mut confirmed = 0;
        while confirmed < self.wake_after {
            match each.next().await {
                Some((i, true)) => {
                    sync::lock(&entry.on).masters[i] = true;
                    confirmed += 1;
                }
                Some((_, false)) => {}
                None => break,
            }
        }
        entry.confirmed.store(confirmed, Ordering::Release);
        if each.is_empty() {
            if confirmed < conns.len() {
                tracing::debug!(
                    confirmed,
                    masters = conns.len(),
                    "some RedLock masters did not take the release subscription (down?); waiters count on the others"
                );
            }
            return;
        }
        let (entry, conns, name) = (entry.clone(), conns.clone(), channel.as_bytes().to_vec());
        drop(self.background.handle().spawn(async move {
            while let Some((i, ok)) = each.next().await {
                if !ok {
                    continue;
                }
                let left = {
                    let mut on = sync::lock(&entry.on);
                    if !on.left {
                        on.masters[i] = true;
                        entry.confirmed.fetch_add(1, Ordering::AcqRel);
                    }
                    on.left
                };
                if left {
                    // Confirmed after the last waiter left: undone here.
                    let mut conn = conns[i].clone();
                    let _ = tokio::time::timeout(timeout, conn.unsubscribe(&name)).await;
                }
            }
        }));
    }

    /// True if some task of this client is waiting for `channel`'s lock.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        sync::lock(&self.channels).contains_key(channel.as_bytes())
    }

    /// The first of this client's waiters for `channel`'s lock that wait in the client (see
    /// `cohort`), for a release of this client to queue; `epoch`: the client's switch epoch.
    pub(crate) fn carry_next(&self, channel: &str, epoch: u64) -> Option<Carry> {
        let entry = sync::lock(&self.channels)
            .get(channel.as_bytes())
            .cloned()?;
        cohort::carry_next(&entry.cohort, epoch)
    }

    /// This client's waiters for `channel`'s lock that wait in the client (see `cohort`).
    pub(crate) fn deferred(&self, channel: &str) -> usize {
        let entry = sync::lock(&self.channels).get(channel.as_bytes()).cloned();
        entry.map_or(0, |entry| cohort::deferred(&entry.cohort))
    }

    /// Channels with at least one waiter (for tests and diagnostics).
    pub(crate) fn active_channels(&self) -> usize {
        sync::lock(&self.channels).len()
    }
}

fn subscribe_error(key: &str, source: redis::RedisError) -> Error {
    Error::from_redis(Operation::Subscribe, key, source)
}

/// Counts one push of subscriber `master` (0 without a quorum); `dropped` (a cluster's and
/// one server's subscriber, not a quorum's) learns of subscriptions that may have ended.
pub(super) fn dispatch(
    channels: &Mutex<ChannelMap>,
    push: PushInfo,
    dropped: Option<&DroppedTx>,
    master: usize,
) {
    let map = sync::lock(channels);
    let bump = |entry: &Channel| entry.heard.send_modify(|heard| heard[master] += 1);
    match (&push.kind, dropped) {
        // The server's own (a moved slot, a master turned replica) or the answer to a waiter's
        // departure: `resubscribe` tells them apart by the channel's state.
        (PushKind::SUnsubscribe, Some(dropped)) => {
            if let Some(Value::BulkString(name)) = push.data.first() {
                if map.contains_key(name.as_slice()) {
                    let _ = dropped.send(Dropped::Channel(name.clone()));
                }
            }
        }
        (PushKind::Disconnection, Some(dropped)) if !map.is_empty() => {
            let _ = dropped.send(Dropped::All);
        }
        _ => {}
    }
    match push.kind {
        // A release message; or a (re)subscription confirmed, which after a reconnect means
        // releases published while the connection was down were missed: look again. Sharded
        // (a cluster) or not; a sharded channel is also unsubscribed by the server when its
        // slot moves to another shard (the client subscribes again there): look again too.
        // A message naming a lock value is a release's grant (see `Interest::expect_grant`):
        // it reaches that waiter alone, if it is one of this client's (the lock is held again,
        // so nobody else need look). Any other message is a plain wake.
        PushKind::Message | PushKind::SMessage => {
            if let [Value::BulkString(name), Value::BulkString(payload), ..] = &push.data[..] {
                if let Some(entry) = map.get(name.as_slice()) {
                    if payload.starts_with(VERSION_TAG.as_bytes()) {
                        // `<value> <request id>`: the request that queued the waiter.
                        let (value, named) = match payload.iter().position(|&b| b == b' ') {
                            Some(at) => (&payload[..at], Some(&payload[at + 1..])),
                            None => (payload.as_slice(), None),
                        };
                        let slot = sync::lock(&entry.grants).get(value).cloned();
                        if let Some(slot) = slot {
                            let named = named.map(<[u8]>::to_vec);
                            *sync::lock(&slot.grant) = Some(Grant { named });
                            if !mutant!(GrantNotWoken) {
                                slot.notify.notify_one();
                            }
                        }
                    } else {
                        bump(entry);
                    }
                }
            }
        }
        PushKind::Subscribe | PushKind::SSubscribe | PushKind::SUnsubscribe => {
            if let Some(Value::BulkString(name)) = push.data.first() {
                if let Some(entry) = map.get(name.as_slice()) {
                    bump(entry);
                }
            }
        }
        // Messages may have been missed while disconnected: make every waiter look again.
        // (Not over a quorum: one master's disconnection says nothing about the lock, and
        // counted as a message it could wake a waiter while the release is still on its way
        // to the others; its resubscription's confirmation counts once it is back.)
        PushKind::Disconnection if dropped.is_some() => {
            for entry in map.values() {
                bump(entry);
            }
        }
        _ => {}
    }
}

/// Subscriptions that may have ended while their channels had waiters.
pub(super) enum Dropped {
    /// The server ended this channel's sharded subscription.
    Channel(Vec<u8>),
    /// A connection of the subscriber dropped (in a cluster: maybe its node died).
    All,
}

pub(super) type DroppedTx = mpsc::UnboundedSender<Dropped>;

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
