//! A waiter, from the client's side: one home for what a waiting acquire has in its client.
//! From the top down: the client's subscriber connections and release channels (`waiters`:
//! `Waiters`, the RESP3 pushes dispatched to channels, resubscription in a cluster); one
//! waiter's interest in a channel (`subscription`: its FIFO turn, the wakes it saw, a grant a
//! release hands it); a channel's state (`channel`); the waiters a release of this client
//! carries (`cohort`); a waiter's place in the queue kept next to the lock in Redis (`queue`:
//! its ticket and place). The wait loop that uses them is `lock::wait_loop`; the entry a waiter
//! takes out of the queue when it leaves is `lock::queue_entry`'s (it sends through the
//! `Client`, above this folder).

pub(crate) mod channel;
#[cfg(all(test, shuttle))]
mod checks;
pub(crate) mod cohort;
pub(crate) mod queue;
pub(crate) mod subscription;
pub(crate) mod waiters;

pub(crate) use subscription::Subscription;
pub(crate) use waiters::Waiters;
