//! The release subscriber of a Sentinel deployment (`MasterSubscriber`): one RESP3 connection
//! to the master that follows it across drops and switches.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{AsyncPushSender, MultiplexedConnection};
use redis::{ProtocolVersion, PushInfo, PushKind, RedisResult};
use tokio::sync::{mpsc, watch, Mutex};

use crate::deploy::sentinel::master::RETRY_PAUSE;
use crate::deploy::sentinel::sentinels::Sentinels;
use crate::error::is_connection_failure;

/// The release subscriber of a Sentinel deployment: one RESP3 connection to the master, which
/// follows the master. When it drops, a task on the client's runtime finds the master again
/// (retrying until it does, while anyone listens) and subscribes there to every channel; each
/// confirmation reaches the waiters like a reconnect's (they look at their lock again).
#[derive(Clone)]
pub(crate) struct MasterSubscriber(Arc<SubscriberInner>);

struct SubscriberInner {
    sentinels: Arc<Sentinels>,
    pushes: Arc<dyn AsyncPushSender>,
    state: Mutex<SubscriberState>,
    /// The id of a connection that dropped, for the task that follows the master.
    dropped: mpsc::UnboundedSender<u64>,
    timeout: Duration,
}

#[derive(Default)]
struct SubscriberState {
    /// The current connection, its id and the switch count when it was found.
    conn: Option<(u64, u64, MultiplexedConnection)>,
    next_id: u64,
    /// Every channel subscribed to (what a new connection subscribes to again).
    channels: HashSet<Vec<u8>>,
}

impl MasterSubscriber {
    /// Connects to the master; pushes go to `pushes`. Call with the client's runtime current:
    /// the connections and the task that follows the master live there.
    pub(crate) async fn connect(
        sentinels: Arc<Sentinels>,
        pushes: impl AsyncPushSender,
    ) -> RedisResult<MasterSubscriber> {
        let (dropped, drops) = mpsc::unbounded_channel();
        let timeout = sentinels
            .connect_timeout
            .saturating_add(sentinels.response_timeout.saturating_mul(2));
        let inner = Arc::new(SubscriberInner {
            sentinels,
            pushes: Arc::new(pushes),
            state: Mutex::new(SubscriberState::default()),
            dropped,
            timeout,
        });
        inner.current(&mut *inner.state.lock().await).await?;
        inner.sentinels.watch();
        let switches = inner.sentinels.switches.subscribe();
        drop(tokio::spawn(follow_master(
            Arc::downgrade(&inner),
            drops,
            switches,
        )));
        Ok(MasterSubscriber(inner))
    }

    pub(crate) async fn subscribe(&self, channel: &[u8]) -> RedisResult<()> {
        let mut state = self.0.state.lock().await;
        state.channels.insert(channel.to_vec());
        let mut conn = self.0.current(&mut state).await?;
        let subscribed = conn.subscribe(channel).await;
        if let Err(error) = &subscribed {
            if is_connection_failure(error) {
                state.conn = None;
            }
        }
        subscribed
    }

    pub(crate) async fn unsubscribe(&self, channel: &[u8]) -> RedisResult<()> {
        let mut state = self.0.state.lock().await;
        state.channels.remove(channel);
        match &state.conn {
            Some((_, _, conn)) => conn.clone().unsubscribe(channel).await,
            None => Ok(()),
        }
    }
}

impl SubscriberInner {
    /// The current connection, or a new one to the master found now, subscribed to every
    /// channel listened on (so no channel is left behind on a connection that dropped).
    async fn current(&self, state: &mut SubscriberState) -> RedisResult<MultiplexedConnection> {
        if let Some((_, _, conn)) = &state.conn {
            return Ok(conn.clone());
        }
        let switches = self.sentinels.switches();
        let id = state.next_id;
        state.next_id += 1;
        let (pushes, dropped) = (self.pushes.clone(), self.dropped.clone());
        let forward = move |push: PushInfo| {
            if push.kind == PushKind::Disconnection {
                let _ = dropped.send(id);
            }
            pushes.send(push)
        };
        let mut conn = self
            .sentinels
            .connect_master(ProtocolVersion::RESP3, Some(Arc::new(forward)))
            .await?;
        for channel in &state.channels {
            conn.subscribe(&channel[..]).await?;
        }
        state.conn = Some((id, switches, conn.clone()));
        Ok(conn)
    }
}

/// Runs on the client's runtime: after each drop of the current subscriber connection, and
/// after each master switch the sentinels announce, moves the subscriptions to the master found
/// then (retrying until they are moved or nobody listens any more). Ends with the subscriber.
async fn follow_master(
    inner: Weak<SubscriberInner>,
    mut drops: mpsc::UnboundedReceiver<u64>,
    mut switches: watch::Receiver<u64>,
) {
    loop {
        // The connection that dropped, or none for a switch.
        let dropped = tokio::select! {
            id = drops.recv() => match id {
                Some(id) => Some(id),
                None => return,
            },
            changed = switches.changed() => match changed {
                Ok(()) => None,
                Err(_) => return,
            },
        };
        loop {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let mut state = inner.state.lock().await;
            let latest = inner.sentinels.switches();
            let stale = state
                .conn
                .as_ref()
                .is_some_and(|(id, seen, _)| match dropped {
                    Some(dropped) => *id == dropped,
                    None => *seen != latest,
                });
            if stale {
                state.conn = None;
            }
            if state.conn.is_some() || state.channels.is_empty() {
                break;
            }
            let moved = tokio::time::timeout(inner.timeout, inner.current(&mut state)).await;
            match moved {
                Ok(Ok(_)) => {
                    tracing::debug!("release subscriber moved to the Sentinel master");
                    break;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "release subscriber: no master yet; retrying");
                    state.conn = None;
                }
                Err(_) => state.conn = None,
            }
            drop(state);
            drop(inner);
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}
