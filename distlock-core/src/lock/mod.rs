//! Holds of every kind, from the caller's side. From the top down: the body under a hold
//! (`run`) and `assert_locked!` (`lock_assert`); the builder (`builder`: `lock`, `semaphore`,
//! `lock_all`, `read`); the one wait loop (`waiting`, with its `backoff`; over RedLock the
//! fencing token from the masters' floors, `fence`); re-entry (`reenter`) and the task-local
//! chain of held locks (`context`); one attempt and what a take becomes (`attempt`); the guard
//! (`guard`) and the acquisition it releases (`hold`); a waiter's entry in the queue, taken out
//! when it goes (`queue_entry`); the kinds of hold, one module each behind one interface
//! (`kind`); the checked terms (`terms`). A module imports only modules below it (`tests/layering.rs`).

pub(crate) mod attempt;
pub(crate) mod backoff;
pub(crate) mod builder;
pub(crate) mod context;
pub(crate) mod guard;
pub(crate) mod hold;
pub(crate) mod kind;
pub(crate) mod lock_assert;
pub(crate) mod queue_entry;
pub(crate) mod reenter;
pub(crate) mod run;
pub(crate) mod terms;
pub(crate) mod wait_loop;
