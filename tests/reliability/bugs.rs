//! Runtime bugs this suite found and reported that are not fixed yet, with the scenarios that
//! show them. A violation attributed to one of these counts in the table and makes its row
//! XFAIL instead of FAIL; once a fix lands, the row passes. Delete an entry (and turn its
//! `check_known` sites into plain `check`s) when its fix is merged, so a regression fails again.
//!
//! Fixed already (their checks are plain `check`s now): B1 release not retried after a dropped
//! connection, B2 release missed while the subscriber reconnects, B3 subscribe not retried
//! after an outage, B4 replies shifted after a reply was lost on an open connection, B5 a
//! retried fresh acquire reporting `is_reentry()`, B6 a stalled acquire outliving its cleanup
//! after the connection was retired on a timeout (now retired only if Redis answers a fresh
//! connection), B7 a lock key left after a cancellation storm (the cleanup of an acquire whose
//! group was still on its way into redis-rs overtook it; a group's owners now wait for its
//! answer), B8 a leader's campaign giving up with `Unreplicated` after a Sentinel failover
//! (it waits it out now), B9 a new term's record proclaimed before its `min_replicas`
//! replicas had it (the proclaim waits for them now).
//!
//! Open: none.

/// A known runtime bug.
#[allow(dead_code)] // used while a bug is open
pub(crate) struct Bug {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
}
