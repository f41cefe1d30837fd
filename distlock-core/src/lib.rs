//! # distlock-core
//!
//! The runtime behind [`distlock`](https://docs.rs/distlock): Redis lock scripts, the global
//! client registry, lock guards, lease renewal (the watchdog), waiting, and errors. Most users
//! depend on the `distlock` facade and write `#[distributed_lock(...)]`; the manual API here is
//! re-exported there too.
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock_core::Error> {
//! use std::time::Duration;
//! distlock_core::init("redis://127.0.0.1:6379/").await?;
//! let guard = distlock_core::lock("order:42")
//!     .ttl(Duration::from_secs(10))
//!     .renew(true)
//!     .wait(Duration::from_secs(2))
//!     .acquire()
//!     .await?;
//! let token = guard.token(); // hand this to the resource you protect
//! # let _ = token;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## What a lock guarantees
//!
//! * **Atomic acquire with an owner.** One Lua script checks and takes the lock and sets its
//!   ttl in the same step (never `SETNX` then `EXPIRE`). The owner is 128 random bits of the
//!   client plus a counter; only the owner can release or renew.
//! * **Re-entry.** Inside a body run under a lock ([`LockBuilder::run`] or the attribute), taking
//!   the same name through the same client again re-enters: the lock hash gets one more hold and
//!   stays held until the last hold is released. A task spawned inside the body is a different
//!   owner and waits like anyone else.
//! * **Idempotent retries.** Each hold is its own hash field, so an acquire or release that is
//!   retried after its reply was lost changes nothing the second time.
//! * **Renewal.** With `renew(true)` a per-client watchdog extends the lease every ttl/3, in
//!   batches (one script call renews up to [`Config::renew_batch_size`] leases). It stops the
//!   moment the guard is released or dropped.
//! * **Loss is an event.** When renewal finds the lock gone or taken, or Redis stays unreachable
//!   until the lease could have run out, [`LockGuard::lost`] resolves and
//!   [`LockGuard::ensure_held`] fails. A lease is considered guaranteed until ttl minus 1% after
//!   the acquire (or renewal) command was *sent*. Bodies run with [`LockBuilder::run`] (and the
//!   attribute) are cancelled when that happens.
//! * **Waiting without polling.** A waiter subscribes to the lock's release channel (one shared
//!   RESP3 subscriber connection per client); the release script publishes there. It also looks
//!   again when the holder's remaining ttl runs out, because a crashed holder never publishes.
//! * **Cancellation safety.** Dropping an `acquire()` future, a `release()` future or a guard
//!   never leaves the lock held until its ttl: the release runs in the background on the tokio
//!   runtime the lock was acquired on.
//! * **Bounded waits on Redis.** Every call is bounded by [`Config::response_timeout`]; the
//!   connection reconnects by itself after Redis restarts.
//!
//! ## What the fault suite checks
//!
//! The repository's reliability suite (`cargo test --test reliability`) runs these against real
//! `redis-server` processes and fails on any violation: mutual exclusion across OS processes
//! (no lost update, occupancy never above one); a SIGKILLed holder is taken over after its
//! lease and not before; a SIGSTOPped holder learns it lost the lock, its body is cancelled,
//! its release changes nothing and its stale fencing token is rejected; a frozen Redis fails
//! callers within the response timeout and reports renewed locks lost; a restarted Redis is
//! reconnected without re-init; killed connections and flushed scripts are survived; a lost or
//! delayed reply never double-counts a hold or hands a reply to the wrong request, and an
//! acquire stalled by a frozen Redis or network does not outlive its cleanup; a storm of
//! cancelled acquires leaves no key, renewal or subscription behind; bad input of every kind is
//! a typed error. (One case remains: if a single connection stalls while Redis stays healthy and
//! its bytes arrive much later, an acquire may land after its cleanup and the lock then sits
//! unowned until its ttl.)
//!
//! ## Fencing tokens
//!
//! A lock alone cannot stop a holder that was paused (GC, `SIGSTOP`, a slow disk) past its lease
//! from writing after someone else took the lock. Each fresh acquisition therefore returns a
//! [fencing token](LockGuard::token) that is strictly greater than every earlier token for the
//! same name; a resource that remembers the highest token it has seen can reject the stale
//! writer (Kleppmann, "How to do distributed locking").
//!
//! The token is the Redis server's clock in microseconds, raised above the last token handed
//! out for the name. That last token is kept in a small per-name key that expires
//! [`Config::fence_retention`] (default 10 min) after the last acquisition, so memory does not
//! grow with high-cardinality names such as `order:<id>`. The trade-off: after a name has been
//! unused for the retention time, monotonicity rests on the server clock alone, so a backwards
//! clock step larger than the retention (or a failover to a replica whose clock is behind) could
//! hand out a smaller token. Keep server clocks disciplined (slewing NTP) and the retention
//! above your largest expected step.
//!
//! ## Limits
//!
//! This is a single-Redis-node lock. With asynchronous replication, a failover can lose a lock
//! that was just acquired on the old primary, and two owners may then hold it; fencing tokens are
//! what protects the resource in that case. RedLock across independent nodes is not implemented.
//! Keys are laid out so that everything one lock touches shares a Redis Cluster hash slot (see
//! [`hash_slot`]), but the client speaks to a single node, and one renewal batch spans the
//! leases of many locks (a cluster client would group its batches by slot).
#![deny(missing_docs)]

mod acquire;
mod background;
mod client;
mod config;
mod connection;
mod context;
mod error;
mod guard;
mod keys;
mod lease;
mod macro_support;
mod registry;
pub mod scripts;
mod waiters;
mod watchdog;

pub use acquire::{lock, LockBuilder};
pub use client::Client;
pub use config::Config;
pub use context::fencing_token;
pub use error::{Error, LossReason, Operation, Result};
pub use guard::LockGuard;
pub use keys::{hash_slot, MAX_NAME_LEN};
pub use lease::{LEASE_MARGIN, MAX_TTL, MIN_TTL};

/// Connects to Redis at `url` and installs the default client: call once at startup.
///
/// Same as `Config::new(url).install()`. A second call fails with
/// [`Error::AlreadyInitialized`]; use [`Config::install_as`] for more clients.
pub async fn init(url: impl Into<String>) -> Result<Client> {
    Config::new(url).install().await
}

/// Support for code generated by `#[distributed_lock]`. **Not public API.**
#[doc(hidden)]
pub mod __private {
    pub use crate::macro_support::*;
}
