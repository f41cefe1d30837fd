//! The typed calls of the protocol `d2`, one per request (see `scripts` for the protocol and
//! its Lua sources): each places its keys and arguments and decodes its reply into an enum.
//!
//! One file per family, named as its scripts' file in `scripts` and its counting rules over
//! a RedLock quorum in `deploy::redlock::count`: `lock` (a lock's acquires, plain, fenced,
//! RedLock's queued and a handed waiter's; leaving the queue; the release of one lock or
//! many; what an acquire and a release find, which the other kinds' calls answer too),
//! `shared` (a semaphore's permit, a read hold, a write that met readers), `set` (a set of
//! locks taken together), `renew` (every kind's renewal), `fence_floor` (RedLock's fencing
//! token rounds) and `leader` (an election's record and candidates). Each implements
//! `wire::request::Call` only.

mod fence_floor;
mod leader;
mod lock;
mod renew;
mod set;
mod shared;

pub(crate) use fence_floor::FenceFloorCall;
pub(crate) use leader::{
    CandidateCall, CandidatesCall, CurrentCall, Line, ProclaimCall, ProclaimMode, Proclaimed,
    Record, TermEntry,
};
pub(crate) use lock::{
    add_acquire, decode_acquire, AcquireCall, Acquired, FencedAcquireCall, HandedAcquireCall,
    LeaveQueueCall, NextWaiter, QueuedAcquireCall, ReleaseCall, ReleaseItem, ReleaseManyCall,
    Released,
};
pub(crate) use renew::{RenewCall, RenewItem, Renewed};
pub(crate) use set::{worst, SetAcquireCall, SetAcquired, SetReleaseCall};
pub(crate) use shared::{Shared, SharedAcquireCall, SharedAcquired, Turn};

#[cfg(test)]
mod tests;
