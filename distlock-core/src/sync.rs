//! Lock access that survives a panicked holder: every critical section in this crate leaves its
//! data consistent, so a poisoned lock's data is still good to use. Also the primitives of the
//! code the concurrency checks drive (the client's waiting core, a lease): `std`'s and tokio's,
//! or, built with `--cfg shuttle` for those checks (`scripts/shuttle.sh`), shuttle's mutexes
//! and atomics and a clock the checks move, so the checker chooses every interleaving of them.

use std::sync::{Condvar, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

#[cfg(all(test, shuttle))]
pub(crate) mod model;

/// The mutex of the checked code (see the module docs).
#[cfg(not(all(test, shuttle)))]
pub(crate) use std::sync::Mutex;

#[cfg(all(test, shuttle))]
pub(crate) use shuttle::sync::Mutex;

/// The atomics of the checked code (see the module docs).
pub(crate) mod atomic {
    #[cfg(all(test, shuttle))]
    pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicUsize};
    pub(crate) use std::sync::atomic::Ordering;
    #[cfg(not(all(test, shuttle)))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};
}

/// The clock and timers of the checked code: tokio's, or (checks) a clock that only the check
/// moves (`model::advance`), so no timer fires unless the check says time passed.
pub(crate) mod time {
    #[cfg(all(test, shuttle))]
    pub(crate) use super::model::{now, sleep_until, timeout_at};
    #[cfg(not(all(test, shuttle)))]
    pub(crate) use tokio::time::{sleep_until, timeout_at};

    /// Now, on the clock leases and waiters read.
    #[cfg(not(all(test, shuttle)))]
    pub(crate) fn now() -> tokio::time::Instant {
        tokio::time::Instant::now()
    }
}

/// A seeded bug the concurrency checks switch on to show that a check catches it
/// (`model::Mutant`); always false outside them, so it compiles to nothing.
#[cfg(not(all(test, shuttle)))]
macro_rules! mutant {
    ($name:ident) => {
        false
    };
}

#[cfg(all(test, shuttle))]
macro_rules! mutant {
    ($name:ident) => {
        $crate::sync::model::is_mutant($crate::sync::model::Mutant::$name)
    };
}

pub(crate) use mutant;

/// A mutex whose lock ignores poisoning: `std`'s, and in the checks shuttle's.
pub(crate) trait Lock {
    /// The guard of a held lock.
    type Guard<'a>
    where
        Self: 'a;

    /// Locks, ignoring poisoning.
    fn lock_unpoisoned(&self) -> Self::Guard<'_>;
}

impl<T: ?Sized> Lock for std::sync::Mutex<T> {
    type Guard<'a>
        = MutexGuard<'a, T>
    where
        Self: 'a;

    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(all(test, shuttle))]
impl<T: ?Sized> Lock for shuttle::sync::Mutex<T> {
    type Guard<'a>
        = shuttle::sync::MutexGuard<'a, T>
    where
        Self: 'a;

    fn lock_unpoisoned(&self) -> Self::Guard<'_> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<L: Lock + ?Sized> Lock for std::sync::Arc<L> {
    type Guard<'a>
        = L::Guard<'a>
    where
        Self: 'a;

    fn lock_unpoisoned(&self) -> L::Guard<'_> {
        (**self).lock_unpoisoned()
    }
}

/// Locks `m`, ignoring poisoning.
pub(crate) fn lock<L: Lock + ?Sized>(m: &L) -> L::Guard<'_> {
    m.lock_unpoisoned()
}

/// Read-locks `l`, ignoring poisoning.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-locks `l`, ignoring poisoning.
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `c` with `guard`, ignoring poisoning.
pub(crate) fn wait<'a, T>(c: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    c.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `c` with `guard` for at most `timeout`, ignoring poisoning.
pub(crate) fn wait_timeout<'a, T>(
    c: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    match c.wait_timeout(guard, timeout) {
        Ok((guard, _)) => guard,
        Err(poisoned) => poisoned.into_inner().0,
    }
}
