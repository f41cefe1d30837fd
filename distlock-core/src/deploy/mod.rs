//! Deployments: how a client reaches Redis — one server, a Redis Cluster or a Sentinel master
//! (`backend`, `sentinel`), the command connection and its checks (`connection`), and a RedLock
//! quorum of independent masters (`redlock`: its counting rules and its requests still out).

pub(crate) mod backend;
pub(crate) mod connection;
pub(crate) mod redlock;
pub(crate) mod sentinel;
