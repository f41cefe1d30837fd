//! # distlock
//!
//! Redis-backed distributed locks as a one-line attribute, with lock keys checked against the
//! function's parameters at compile time. (Crate docs are completed with the macro.)
#![deny(missing_docs)]

#[doc(inline)]
pub use distlock_core::{
    fencing_token, init, lock, Client, Config, Error, LockBuilder, LockGuard, LossReason,
    Operation, Result,
};

#[doc(inline)]
pub use distlock_macros::distributed_lock;

/// Support for generated code. **Not public API**: may change in any release without notice.
#[doc(hidden)]
pub mod __private {
    pub use distlock_core::__private::*;
}
