//! What the testing kit (`testing`, feature `testing`) shows the server checks of every client
//! in the process: a server clock stepped forward, and a request to confirm every lease now.
//! Compiled only with the feature; without it the server check reads the servers as they are.
//!
//! A test cannot step a `redis-server`'s wall clock (that needs an `LD_PRELOAD` shim built with
//! a C compiler) nor make a client confirm its leases from outside. So the kit moves the keys'
//! expiries on the server itself (what a step does to them) and tells the server checks here,
//! by the server's run id (`INFO server`, which every check reads): a reading of that server
//! is then `ahead` further than its `TIME` said, which the check counts as a step exactly as
//! it counts a real one, and a new confirmation makes the check count one more epoch, so the
//! watchdog confirms every lease on the server at once, as after a real step. The kit then
//! wakes every check, so the holder hears within a round trip instead of a check period.
//!
//! Each change is stamped with a number that rises across the process ([`now`]): a check
//! compares a server's stamps with its previous reading's, or, at its first reading of the
//! server, with the stamp when the check started. So a fault made after a client connected is
//! seen by it even when its first reading comes later (a real step then would go unnoticed:
//! there is no earlier reading to compare the clock with).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::sync;

/// What the checks are shown of one server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shown {
    /// How far the server's clock is shown ahead of what its `TIME` says, in microseconds.
    pub(crate) ahead_us: i64,
    /// The stamp of the latest step of its clock (0: none).
    pub(crate) stepped: u64,
    /// The stamp of the latest request to confirm every lease on it (0: none).
    pub(crate) confirmed: u64,
}

/// By run id.
static SHOWN: LazyLock<Mutex<HashMap<String, Shown>>> = LazyLock::new(Mutex::default);

/// The latest stamp, bumped by every change: every check reads its servers at once then.
static STAMP: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::channel(0).0);

/// What the checks are shown of the server whose run id is `run_id` (nothing for `None`: the
/// check could not read it, an ACL that refuses `INFO`).
pub(crate) fn shown(run_id: Option<&str>) -> Shown {
    run_id
        .and_then(|id| sync::lock(&*SHOWN).get(id).copied())
        .unwrap_or_default()
}

/// The latest stamp: a check started now sees every change made after it.
pub(crate) fn now() -> u64 {
    *STAMP.borrow()
}

/// From now on, the server `run_id`'s clock reads `by` further ahead (a step forward).
pub(crate) fn step_clock(run_id: &str, by: Duration) {
    let by = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
    change(run_id, |shown, stamp| {
        shown.ahead_us = shown.ahead_us.saturating_add(by);
        shown.stepped = stamp;
    });
}

/// Every client that checks the server `run_id` confirms every lease at its next reading.
pub(crate) fn confirm_leases(run_id: &str) {
    change(run_id, |shown, stamp| shown.confirmed = stamp);
}

fn change(run_id: &str, apply: impl FnOnce(&mut Shown, u64)) {
    let mut all = sync::lock(&*SHOWN);
    let mut stamp = 0;
    // Under the table's lock: a check that reads the stamp sees the change made with it.
    STAMP.send_modify(|n| {
        *n += 1;
        stamp = *n;
    });
    apply(all.entry(run_id.to_owned()).or_default(), stamp);
}

/// Changes with every change the kit makes: the check reads its servers then.
pub(crate) fn wakes() -> watch::Receiver<u64> {
    STAMP.subscribe()
}
