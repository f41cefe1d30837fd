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
//! connection).
//!
//! Open: [`B7`].

/// A known runtime bug.
pub(crate) struct Bug {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
}

/// Seen in row 8 (cancellation storm) about once in ten runs on a loaded 2-core machine, with
/// the code of every session since at least issue 19 (3 of 30 runs at that commit, 2 of 24
/// after issue 21's one-round-trip `run`): after the client came to rest, one or two lock keys
/// of the storm are still there (they expire at their ttl, 2–10 s). Some cancelled acquire or
/// body lands after its cleanup, or a cleanup is dropped; not found yet.
pub(crate) static B7: Bug = Bug {
    id: "B7",
    title: "a lock key left after a cancellation storm (rare, under load)",
};
