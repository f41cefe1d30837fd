//! Why a command failed: one line for the operator, and the exit status that goes with it.

use std::fmt;

/// Exit statuses, as `--help` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Redis could not be reached or refused, a key holds something that is not a lock, or
    /// the operator declined.
    Failed = 1,
    /// Bad arguments or configuration (clap's own errors exit with 2 too).
    Usage = 2,
    /// The named lock is not held.
    NoSuchLock = 3,
}

/// A failed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) exit: Exit,
    /// One line, without the password of any URL.
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn failed(message: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::Failed,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::Usage,
            message: message.into(),
        }
    }

    pub(crate) fn no_such_lock(message: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::NoSuchLock,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Writing the output failed (a closed pipe is handled where the output is written).
impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Failure {
        Failure::failed(format!("cannot write the output: {error}"))
    }
}
