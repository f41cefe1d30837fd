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
//! answer).
//!
//! Open: [`B8`], [`B9`].

/// A known runtime bug.
#[allow(dead_code)] // used while a bug is open
pub(crate) struct Bug {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
}

/// `LeaderBuilder::campaign()` (and so `run()`) gives up with `Error::Unreplicated` when the
/// election's lock was taken but too few replicas acknowledged it, a failure that passes by
/// waiting: with `min_replicas(ALL_REPLICAS)`, every acquire right after a Sentinel switch
/// (until the sentinels list the new master's replicas). Row 24f's candidates say `REFUSED`
/// and campaign again.
pub(crate) static B8: Bug = Bug {
    id: "B8",
    title:
        "a leader campaign gives up with Unreplicated after a Sentinel failover (min_replicas all)",
};

/// A new term is proclaimed (its record written: who leads, in which term) without waiting for
/// the election's `min_replicas` replicas, though its lock was: a failover right after an
/// election promotes a replica where the new leader holds the lock but the record still names
/// the previous leader, so `current()` and observers say nobody leads while it does. Row 24f
/// (SENTINEL FAILOVER right after an election, replication lagged and held) shows it.
pub(crate) static B9: Bug = Bug {
    id: "B9",
    title: "a new term's record is not replicated before the term is proclaimed (min_replicas)",
};
