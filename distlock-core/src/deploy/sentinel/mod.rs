//! Redis Sentinel: finding the master of a service, and connections that follow it.
//!
//! The sentinels are asked in order (`SENTINEL GET-MASTER-ADDR-BY-NAME <service>`); the first
//! address they give whose server answers `ROLE` as a master is the master. redis-rs's own
//! `SentinelClient` hands out connections to a fixed address, so after a failover nothing
//! would move them; here a connection is found afresh whenever it must be:
//!
//! * the command connection ([`MasterLink`]) finds the master on first use; `connection`
//!   replaces it (with a fresh, unconnected one) when it fails, or when the node answers
//!   `READONLY` (a demoted master), see [`follows_master_after`];
//! * the subscriber ([`MasterSubscriber`]) reconnects to the master found then, and subscribes
//!   again to every channel its waiters listen on, as soon as its connection drops (Sentinel
//!   disconnects the clients of every node it reconfigures).
//!
//! Every search is bounded: each sentinel and the master get the connect timeout and the
//! response timeout, and while a master is being promoted (sentinels name a node that is not a
//! master yet, or not reachable) the sentinels are asked again for at most one response
//! timeout. Callers bound it further by their own timeouts.
//!
//! The files: `sentinels` (the sentinels of a service and what they told), `master` (finding
//! the master), `switches` (counting master switches), `healthy` with `members` (the replicas
//! `ALL_REPLICAS` waits for), `link` (the command link) and `subscriber` (the release
//! subscriber).

mod healthy;
mod link;
mod master;
mod members;
mod sentinels;
mod subscriber;
mod switches;

pub(crate) use link::MasterLink;
pub(crate) use master::follows_master_after;
pub(crate) use sentinels::Sentinels;
pub(crate) use subscriber::MasterSubscriber;
