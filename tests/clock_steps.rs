//! Clock steps on the Redis server: its wall clock jumps (an operator's `date -s`, an NTP step
//! after a long drift, a VM resumed from a snapshot). Redis keeps a key's expiry as a wall-clock
//! date, so a step forward past a lock's remaining ttl expires the lock at once, on the server,
//! with nothing said to its holder. One `testkit::belief` round each, on a fresh deployment
//! whose servers' wall clock `testkit::step_round` steps 1 s after the lock was taken (an
//! `LD_PRELOAD` shim on real `redis-server` processes): the holder asks `ensure_held()` every
//! 25 ms, a contender tries to take the lock every 10 ms.
//!
//! What no client can prevent: the contender takes the lock right after the step. What the
//! client owes its holder: to be told, soon. The bound asserted is how long the holder may go
//! on believing after the contender took the lock: the client reads the servers' clocks every
//! `Config::server_check` (250 ms) and confirms every lease when one ran ahead. Without the
//! check the renewed holder believed for 982 ms (until its next renewal), the holder without
//! renewal for the rest of its lease. A semaphore's permit and a read hold keep their
//! deadlines as scores in the server's time, so a step forward frees them to the next acquire
//! too: their holders are told the same way (over RedLock too: a step on a majority of the
//! masters is told, one on a minority keeps the hold).

use std::time::Duration;

use testkit::belief::{Kind, Timeline};
use testkit::{step_round, step_round_of, Stepped};

/// How long the holder may believe after the contender took the lock: the clock check's
/// period (250 ms), a round trip to confirm, and the 25 ms between the holder's checks, with
/// room for a loaded machine.
const TOLD_WITHIN: Duration = Duration::from_millis(700);

const RUN: Duration = Duration::from_secs(4);

async fn forward(on: Stepped, ttl: Duration, renew: bool, by: Duration) -> Timeline {
    step_round(on, (ttl, renew, RUN), (true, by)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_holder_is_told_soon_after_a_step_forward_expired_its_lock() {
    // ttl 6 s: renewed every 2 s, so the next renewal alone would tell it up to 2 s late.
    let secs = Duration::from_secs;
    forward(Stepped::Server, secs(6), true, secs(60))
        .await
        .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_without_renewal_is_told_soon_after_a_step_forward_expired_its_lock() {
    // No renewal: nothing but the clock check contacts the server before the lease runs out.
    let secs = Duration::from_secs;
    forward(Stepped::Server, secs(8), false, secs(60))
        .await
        .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_keeps_the_lock_and_tells_nobody_it_was_lost() {
    // The key outlives the lease on the server (safe: nobody else can take it meanwhile).
    let secs = Duration::from_secs;
    let t = step_round(Stepped::Server, (secs(3), true, RUN), (false, secs(60))).await;
    t.assert_kept();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_holder_is_told_soon_after_a_step_forward_on_its_master() {
    // The step stays under the node timeout (15 s) so the cluster itself stays healthy.
    let secs = Duration::from_secs;
    forward(Stepped::Cluster, secs(6), true, secs(9))
        .await
        .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_step_on_a_majority_of_masters_is_told() {
    let secs = Duration::from_secs;
    forward(Stepped::Quorum { stepped: 2 }, secs(6), true, secs(60))
        .await
        .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_step_on_a_minority_of_masters_keeps_the_lock() {
    let secs = Duration::from_secs;
    forward(Stepped::Quorum { stepped: 1 }, secs(6), true, secs(60))
        .await
        .assert_kept();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_holder_is_told_soon_after_a_step_forward_expired_its_permit() {
    let secs = Duration::from_secs;
    step_round_of(
        Kind::Permit,
        Stepped::Server,
        (secs(6), true, RUN),
        (true, secs(60)),
    )
    .await
    .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_is_told_soon_after_a_step_forward_expired_its_share() {
    let secs = Duration::from_secs;
    step_round_of(
        Kind::Read,
        Stepped::Server,
        (secs(8), false, RUN),
        (true, secs(60)),
    )
    .await
    .assert_told_within(TOLD_WITHIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_keeps_a_permit_and_a_read_hold() {
    let secs = Duration::from_secs;
    for kind in [Kind::Permit, Kind::Read] {
        step_round_of(
            kind,
            Stepped::Server,
            (secs(3), true, RUN),
            (false, secs(60)),
        )
        .await
        .assert_kept();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_step_on_a_majority_tells_a_permit_holder_and_a_reader() {
    let secs = Duration::from_secs;
    for kind in [Kind::Permit, Kind::Read] {
        step_round_of(
            kind,
            Stepped::Quorum { stepped: 2 },
            (secs(6), true, RUN),
            (true, secs(60)),
        )
        .await
        .assert_told_within(TOLD_WITHIN);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_step_on_a_minority_keeps_a_permit_and_a_read_hold() {
    let secs = Duration::from_secs;
    for kind in [Kind::Permit, Kind::Read] {
        step_round_of(
            kind,
            Stepped::Quorum { stepped: 1 },
            (secs(6), true, RUN),
            (true, secs(60)),
        )
        .await
        .assert_kept();
    }
}
