//! One lock, from the caller's side: the builder (`acquire`), the acquire/wait loop (`waiting`,
//! with its `backoff` and, over RedLock, the waiter's `queue` entry and the `fence`), one
//! attempt (`attempt`), re-entry (`reenter`), the guard and its
//! hold (`guard`), several locks taken together (`multi`), a semaphore's permits and shared (read) holds as kinds of lock (`permits`,
//! `shared`), the body under a lock (`run`), the task-local chain of held locks (`context`) and
//! `assert_locked!` (`lock_assert`).

pub(crate) mod acquire;
pub(crate) mod attempt;
pub(crate) mod backoff;
pub(crate) mod context;
pub(crate) mod fence;
pub(crate) mod guard;
pub(crate) mod lock_assert;
pub(crate) mod multi;
pub(crate) mod permits;
pub(crate) mod queue;
pub(crate) mod reenter;
pub(crate) mod run;
pub(crate) mod shared;
pub(crate) mod waiting;
