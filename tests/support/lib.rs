//! Test support for distlock's integration tests, examples and benchmarks: throwaway
//! `redis-server` processes on free loopback ports, stopped by PID (and a `postgres` and a
//! `prometheus` the same way).
//!
//! Each [`RedisServer`] runs with `--save ""` and no AOF, so nothing touches the disk, and is
//! killed when dropped. `scripts/test.sh` installs `redis-server` when it is missing.
#![deny(missing_docs)]

mod acl;
pub mod belief;
mod child;
mod cli;
mod clock;
mod cluster;
pub mod delay;
mod document;
mod fairness;
mod holds;
mod inspect;
mod locks;
#[cfg(feature = "tls")]
mod pki;
mod postgres;
mod prometheus;
pub mod proxy;
mod quorum;
mod races;
mod replicas;
mod sentinel;
mod server;

pub use acl::{acl_line, acl_refusals, documented_acl, AclLine, ACL_PASSWORD};
pub use child::ChildTest;
pub use clock::{step_round, step_round_of, ShiftedClock, Stepped};
pub use cluster::RedisCluster;
pub use document::{markdown_anchor, with_kept_part};
pub use fairness::{fairness_run, jain, Fairness, FairnessRun, Hold};
pub use holds::{permit_race, read_write_race, writer_behind_readers, Inside};
pub use inspect::{
    all_keys, command_calls, eventually, lock_keys, pubsub_channels, queued, until_queued,
};
pub use locks::{acquire_soon, client_with, quick_client, take_and_release};
#[cfg(feature = "tls")]
pub use pki::Pki;
pub use postgres::PostgresServer;
pub use prometheus::{encode as url_encode, Prometheus};
pub use quorum::{at_rest, expect_no_quorum};
pub use races::{counter, counter_race, race_counter, wait_for_release};
pub use sentinel::{LoneSentinel, RedisSentinel, SentinelOptions};
pub use server::{free_port, Paused, RedisServer, ServerOptions, TlsFiles};
