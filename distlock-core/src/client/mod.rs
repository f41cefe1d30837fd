//! A connected client: the command connection, the watchdog and the release subscriber.
//!
//! [`Client`] and what it holds (`state`), how it connects (`connect`), its calls (`calls`),
//! their group commit (`batch`), its identity record (`identity`), its waiters (`waiting`) and
//! its renewals (`watchdog`).

pub(crate) mod batch;
mod calls;
mod connect;
pub(crate) mod identity;
mod state;
pub(crate) mod waiting;
pub(crate) mod watchdog;

pub(crate) use connect::Boxed;
pub use state::Client;
