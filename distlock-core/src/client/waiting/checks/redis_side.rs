//! The Redis side of the waiting core's checks, as small as they need: one lock's key, its
//! waiters' queue (tickets and the request that last queued each), and its release channel,
//! whose messages reach the client in order but later than the replies (they travel on the
//! subscriber connection), through the client's own `dispatch`.
//!
//! Each operation is one script, applied at once (Redis runs a script alone); what the client
//! sees of it comes back over [`in_flight`] points, where the checker may run anything else
//! and a task may be cancelled. The scripts' rules kept here (`wire/scripts`): a release hands
//! the lock to the first waiter queued and names the request that queued it
//! (`grant_prelude!`'s `turn_over`), after queuing the releasing client's next waiter
//! (`release_lock`: even when the lock is found another's); a handed waiter's attempt takes a
//! lock that is its own, queues behind a holder, and turns a free lock over to a waiter queued
//! before it (`ACQUIRE_HANDED`); `LEAVE_QUEUE` takes a waiter out and lets go a lock handed to
//! it meanwhile. Whether a lock's key matches is all that decides who holds it.

use std::collections::VecDeque;
use std::sync::Arc;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

use crate::client::waiting::channel::{Channel, ChannelMap};
use crate::client::waiting::waiters::dispatch;
use crate::sync::{self, Mutex};
use crate::wire::calls::NextWaiter;

/// The release channel's name.
pub(super) const CHANNEL: &[u8] = b"checked:released";

/// A point where a request or its reply is on the wire: the checker may run any other task
/// here, and a task cancelled meanwhile is dropped here.
pub(super) async fn in_flight() {
    shuttle::future::yield_now().await;
}

#[derive(Default)]
struct State {
    /// The lock key's value.
    holder: Option<Vec<u8>>,
    /// The waiters' queue: ticket, value, the request that last queued it.
    queue: Vec<(u64, Vec<u8>, Vec<u8>)>,
    /// Published, not yet dispatched to the client.
    pipe: VecDeque<Vec<u8>>,
    /// The client stopped listening (the check's end).
    closed: bool,
}

/// What a lock attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    Taken,
    Busy,
}

/// One lock on one server, and the client's channel map its messages are dispatched to.
pub(super) struct Server {
    state: Mutex<State>,
    published: Notify,
    pub(super) channels: Arc<Mutex<ChannelMap>>,
}

impl Server {
    /// A server whose lock is held by `holder`, and a client listening on its release channel
    /// (`entry`, one server: woken by one master).
    pub(super) fn new(holder: &[u8], entry: Arc<Channel>) -> Self {
        entry.confirmed.store(1, sync::atomic::Ordering::Release);
        let mut channels = ChannelMap::new();
        channels.insert(CHANNEL.to_vec(), entry);
        Server {
            state: Mutex::new(State {
                holder: Some(holder.to_vec()),
                ..State::default()
            }),
            published: Notify::new(),
            channels: Arc::new(Mutex::new(channels)),
        }
    }

    fn publish(&self, s: &mut State, message: Vec<u8>) {
        s.pipe.push_back(message);
        self.published.notify_one();
    }

    /// `turn_over`: the lock to the first waiter queued (below `below`, a ticket), its grant
    /// naming the request that queued it; true if one was.
    fn turn_over(&self, s: &mut State, below: Option<u64>) -> bool {
        let Some(&(ticket, _, _)) = s.queue.first() else {
            return false;
        };
        if below.is_some_and(|below| ticket >= below) {
            return false;
        }
        let (_, value, id) = s.queue.remove(0);
        let mut grant = value.clone();
        grant.push(b' ');
        grant.extend_from_slice(&id);
        s.holder = Some(value);
        self.publish(s, grant);
        true
    }

    /// `let_go`: handed on to the first waiter, or deleted with a plain wake.
    fn let_go(&self, s: &mut State) {
        if !self.turn_over(s, None) {
            s.holder = None;
            self.publish(s, b"1".to_vec());
        }
    }

    fn enqueue(s: &mut State, ticket: u64, value: &[u8], id: &[u8]) {
        s.queue.retain(|(_, v, _)| v != value);
        let at = s.queue.partition_point(|(t, _, _)| *t <= ticket);
        s.queue.insert(at, (ticket, value.to_vec(), id.to_vec()));
    }

    /// A plain attempt (`SET NX`: a waiter's first, before it subscribed).
    pub(super) fn set_nx(&self, value: &[u8]) -> Found {
        let mut s = sync::lock(&self.state);
        if s.holder.is_none() {
            s.holder = Some(value.to_vec());
            return Found::Taken;
        }
        Found::Busy
    }

    /// A handed waiter's queued attempt (`ACQUIRE_HANDED`) with request `id`.
    pub(super) fn acquire_handed(&self, value: &[u8], ticket: u64, id: &[u8]) -> Found {
        let mut s = sync::lock(&self.state);
        if s.holder.as_deref() == Some(value) {
            s.queue.retain(|(_, v, _)| v != value);
            return Found::Taken;
        }
        if s.holder.is_none() && !self.turn_over(&mut s, Some(ticket)) {
            s.queue.retain(|(_, v, _)| v != value);
            s.holder = Some(value.to_vec());
            return Found::Taken;
        }
        Self::enqueue(&mut s, ticket, value, id);
        Found::Busy
    }

    /// A release of `value` (`RELEASE`), queuing the client's `next` waiter: true if the lock
    /// was `value`'s.
    pub(super) fn release(&self, value: &[u8], next: Option<NextWaiter>) -> bool {
        let mut s = sync::lock(&self.state);
        if let Some(next) = next {
            if s.holder.as_deref() != Some(next.value.as_bytes()) {
                Self::enqueue(
                    &mut s,
                    next.ticket,
                    next.value.as_bytes(),
                    next.id.as_bytes(),
                );
            }
        }
        let ours = s.holder.as_deref() == Some(value);
        if ours || (s.holder.is_none() && next.is_some()) {
            self.let_go(&mut s);
        }
        ours
    }

    /// `LEAVE_QUEUE` of `value`, letting go a lock handed to it meanwhile.
    pub(super) fn leave_queue(&self, value: &[u8]) {
        let mut s = sync::lock(&self.state);
        s.queue.retain(|(_, v, _)| v != value);
        if s.holder.as_deref() == Some(value) {
            self.let_go(&mut s);
        }
    }

    /// The lock's holder now (an assertion's view: one script's worth).
    pub(super) fn holder(&self) -> Option<Vec<u8>> {
        sync::lock(&self.state).holder.clone()
    }

    /// The queue's values now.
    pub(super) fn queued(&self) -> Vec<Vec<u8>> {
        let s = sync::lock(&self.state);
        s.queue.iter().map(|(_, v, _)| v.clone()).collect()
    }

    /// The client's subscriber: dispatches every message, in order, until [`Server::close`]
    /// and the pipe is empty.
    pub(super) async fn deliver(&self) {
        loop {
            let published = self.published.notified();
            let mut published = std::pin::pin!(published);
            published.as_mut().enable();
            let next = {
                let mut s = sync::lock(&self.state);
                match s.pipe.pop_front() {
                    Some(message) => Some(message),
                    None if s.closed => return,
                    None => None,
                }
            };
            match next {
                Some(message) => {
                    in_flight().await;
                    let push = PushInfo {
                        kind: PushKind::Message,
                        data: vec![
                            Value::BulkString(CHANNEL.to_vec()),
                            Value::BulkString(message),
                        ],
                    };
                    dispatch(&self.channels, push, None, 0);
                }
                None => published.await,
            }
        }
    }

    /// The client stops listening once what was published is delivered.
    pub(super) fn close(&self) {
        sync::lock(&self.state).closed = true;
        self.published.notify_one();
    }
}
