//! A Redis server restarted under a held lock: without persistence (or from a snapshot older
//! than the lock) it comes back without the lock's key, and another client can take the lock
//! while its holder still believes it holds it. One `testkit::belief::restart_round` each: the
//! server is killed (`SIGKILL`) and started again on the same port 1 s after the lock was
//! taken; the holder asks `ensure_held()` every 25 ms, a contender tries every 10 ms.
//!
//! The client notices the restart (`Config::server_check`: the server's run id changed) and
//! confirms every lease. Without that, the renewed holder (ttl 6 s) believed for 845 ms after
//! the contender took the lock (until its next renewal), the holder without renewal for the
//! rest of its lease (2,825 ms, until the round ended); with it, 62–340 ms in each case. A
//! semaphore's permit and a read hold (against a writer) are told the same way.

use std::time::Duration;

use testkit::belief::{restart_round, Kind};

/// How long the holder may believe after the contender took the lock: the check's period
/// (250 ms), the reconnection's backoff (up to 500 ms), a confirming round trip, room for load.
const TOLD_WITHIN: Duration = Duration::from_millis(1200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_holder_is_told_soon_after_the_server_restarted_without_its_lock() {
    let secs = Duration::from_secs;
    restart_round(Kind::Lock, secs(6), true, secs(4))
        .await
        .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_without_renewal_is_told_soon_after_the_server_restarted_without_its_lock() {
    let secs = Duration::from_secs;
    restart_round(Kind::Lock, secs(8), false, secs(4))
        .await
        .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_holder_is_told_soon_after_the_server_restarted_without_its_permit() {
    let secs = Duration::from_secs;
    restart_round(Kind::Permit, secs(6), true, secs(4))
        .await
        .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_without_renewal_is_told_soon_after_the_server_restarted_without_its_share() {
    let secs = Duration::from_secs;
    restart_round(Kind::Read, secs(8), false, secs(4))
        .await
        .assert_told_within(TOLD_WITHIN);
}
