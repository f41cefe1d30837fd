//! Why a call to Redis failed, whichever deployment sent it (the command connection, a RedLock
//! quorum); the client turns it into a typed [`crate::Error`].

/// Why a call failed.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// No reply within the timeout (the connection was retired).
    Timeout,
    /// Redis or the connection failed (a mismatched reply is reported as an I/O error).
    Redis(redis::RedisError),
    /// A RedLock quorum: too few masters agreed (see `redlock::count`).
    NoQuorum { agreed: usize, required: usize },
}
