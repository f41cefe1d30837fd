//! Deployments: how a client reaches Redis — one server, a Redis Cluster or a Sentinel master
//! (`backend`, `sentinel`) through one command connection and its checks (`connection`), or a
//! RedLock quorum of independent masters (`redlock`: its counting rules and its requests still
//! out). [`Deployment`] is the one interface the lock code calls; `clock` watches the servers'
//! wall clocks for steps, which expire locks early.

pub(crate) mod backend;
pub(crate) mod call_error;
#[cfg(feature = "testing")]
pub(crate) mod check_faults;
pub(crate) mod connection;
pub(crate) mod redlock;
pub(crate) mod sentinel;
pub(crate) mod server_check;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use crate::deploy::call_error::CallError;
use crate::deploy::connection::Connection;
use crate::deploy::redlock::count::{majority, Quorate};
use crate::deploy::redlock::{Quorum, Taken};
use crate::wire::ids::ShortId;
use crate::wire::request::Call;

/// Where a client's calls go: each deployment with only its own state. A new deployment is a
/// module of its own and a variant here.
#[derive(Clone)]
pub(crate) enum Deployment {
    /// One command connection: one server, a Redis Cluster (redis-rs routes each call by its
    /// keys' slot) or the master of a Sentinel service (followed across failovers).
    Direct(Arc<Connection>),
    /// A RedLock quorum: one connection per independent master, every call counted by
    /// majority.
    Quorum(Arc<Quorum>),
}

impl Deployment {
    /// Runs one typed call with `timeout` (plus its `WAIT`'s own timeout): on the connection
    /// ([`Connection::call`]) or on every master of the quorum ([`Quorum::call`]). With the
    /// number of replicas that acknowledged the write when the call asked for a `WAIT` (never
    /// over a quorum, which refuses `min_replicas`).
    pub(crate) async fn call<C: Quorate>(
        &self,
        call: &C,
        timeout: Duration,
    ) -> Result<(C::Reply, Option<usize>), CallError> {
        match self {
            Deployment::Direct(conn) => conn.call(call, timeout).await,
            Deployment::Quorum(quorum) => quorum.call(call, timeout).await,
        }
    }

    /// A call sent on one server, Sentinel or a cluster only (a handed waiter's attempt: only
    /// where a release hands the lock over, never over a quorum), so it needs no RedLock
    /// counting rule. Over a quorum it is not sent: `NoQuorum`, and a debug build panics.
    pub(crate) async fn call_one<C: Call>(
        &self,
        call: &C,
        timeout: Duration,
    ) -> Result<(C::Reply, Option<usize>), CallError> {
        match self {
            Deployment::Direct(conn) => conn.call(call, timeout).await,
            Deployment::Quorum(quorum) => {
                debug_assert!(false, "a call of one server sent to a RedLock quorum");
                Err(CallError::NoQuorum {
                    agreed: 0,
                    required: majority(quorum.len()),
                })
            }
        }
    }

    /// The one command connection, for what only it has (the group commit of `batch`); `None`
    /// for a quorum.
    pub(crate) fn direct(&self) -> Option<&Arc<Connection>> {
        match self {
            Deployment::Direct(conn) => Some(conn),
            Deployment::Quorum(_) => None,
        }
    }

    /// Every command connection: the one, or each master's of a quorum.
    pub(crate) fn connections(&self) -> Vec<Arc<Connection>> {
        match self {
            Deployment::Direct(conn) => vec![conn.clone()],
            Deployment::Quorum(quorum) => quorum.connections(),
        }
    }

    /// The servers that must agree on a call: a majority of a RedLock quorum's masters, the
    /// one server elsewhere. The `required` of an `Error::NoQuorum`.
    pub(crate) fn majority(&self) -> usize {
        match self {
            Deployment::Direct(_) => 1,
            Deployment::Quorum(quorum) => majority(quorum.len()),
        }
    }

    /// The fencing token of a fenced take: over RedLock the rounds over the masters' fence
    /// floors ([`Quorum::fence_token`], each round bounded by `timeout` and identified by
    /// `new_id`); on one command connection the acquire's own token, from the one floor that
    /// decides it.
    pub(crate) async fn fence_token(
        &self,
        taken: Taken<'_>,
        timeout: Duration,
        new_id: impl Fn() -> ShortId,
    ) -> Result<u64, CallError> {
        match self {
            Deployment::Direct(_) => Ok(taken.token),
            Deployment::Quorum(quorum) => quorum.fence_token(taken, timeout, new_id).await,
        }
    }

    /// A release hands the lock to the first waiter queued in Redis, naming the request that
    /// queued it (one server, Sentinel, a cluster: one server decides the lock). Over RedLock no
    /// master decides alone: waiters queue by ticket on every master and take the lock
    /// themselves when woken.
    pub(crate) fn hands_over(&self) -> bool {
        matches!(self, Deployment::Direct(_))
    }

    /// Every call is counted by a majority of independent masters (RedLock): a reply of one
    /// server says nothing alone, a subscription is one per master, and replicas are not
    /// waited for (`min_replicas` is refused).
    pub(crate) fn counts_majority(&self) -> bool {
        matches!(self, Deployment::Quorum(_))
    }

    /// A fenced take's token comes from rounds over the masters' fence floors
    /// ([`Deployment::fence_token`]), not from the acquire's reply alone: each master keeps its
    /// own floor, by its own clock.
    pub(crate) fn rounds_tokens(&self) -> bool {
        matches!(self, Deployment::Quorum(_))
    }

    /// Release notifications go through sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`): a cluster,
    /// where a lock's channel lives on its key's shard.
    pub(crate) fn publishes_sharded(&self) -> bool {
        self.routes_by_slot()
    }

    /// Keys are routed by hash slot to their shard (a cluster): a set over several slot groups
    /// is taken one group at a time, and its canonical order groups its names by slot.
    pub(crate) fn routes_by_slot(&self) -> bool {
        match self {
            Deployment::Direct(conn) => conn.backend().is_cluster(),
            Deployment::Quorum(_) => false,
        }
    }

    /// The master switches seen so far (Sentinel; 0 elsewhere: see `Backend::switches`).
    pub(crate) fn switches(&self) -> u64 {
        match self {
            Deployment::Direct(conn) => conn.backend().switches(),
            Deployment::Quorum(_) => 0,
        }
    }

    /// Woken at every master switch; `None` where masters do not switch (see
    /// `Backend::switches`).
    pub(crate) fn watch_switches(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Deployment::Direct(conn) => conn.backend().watch_switches(),
            Deployment::Quorum(_) => None,
        }
    }

    /// `min_replicas` as the count to `WAIT` for (see `Backend::replicas_to_wait_for`).
    pub(crate) fn replicas_to_wait_for(&self, replicas: usize) -> usize {
        match self {
            Deployment::Direct(conn) => conn.backend().replicas_to_wait_for(replicas),
            Deployment::Quorum(_) => replicas,
        }
    }
}
