//! Clock steps on the Redis server: its wall clock jumps (an operator's `date -s`, an NTP step
//! after a long drift, a VM resumed from a snapshot). Redis keeps a key's expiry as a wall-clock
//! date, so a step forward past a lock's remaining ttl expires the lock at once, on the server,
//! with nothing said to its holder. One `testkit::belief` round each, against a real server
//! whose wall clock `testkit::ShiftedClock` steps 1 s after the lock was taken: the holder asks
//! `ensure_held()` every 25 ms, a contender tries to take the lock every 10 ms.
//!
//! What no client can prevent: the contender takes the lock right after the step. What the
//! client owes its holder: to be told. The bound asserted here is how long the holder may go on
//! believing after the contender took the lock: the client watches the server's clock
//! (`Config::clock_check`) and confirms every lease at once when the server's clock ran ahead of
//! its own.

use std::sync::Arc;
use std::time::Duration;

use distlock::Config;
use testkit::belief::{self, Round, Timeline};
use testkit::{RedisCluster, RedisServer, ShiftedClock};

/// How long the holder may believe after the contender took the lock: the clock check's
/// period (250 ms by default), a round trip to confirm, and the 25 ms between the holder's
/// checks, with room for a loaded machine.
const TOLD_WITHIN: Duration = Duration::from_millis(700);

fn round(url: String, ttl: Duration, renew: bool, run: Duration) -> Round {
    round_with(move || Config::new(url.clone()), ttl, renew, run)
}

fn round_with(
    config: impl Fn() -> Config + Send + Sync + 'static,
    ttl: Duration,
    renew: bool,
    run: Duration,
) -> Round {
    let config = Arc::new(config);
    Round {
        connect: Arc::new(move || {
            let config = config();
            Box::pin(async move { config.connect().await.expect("connect") })
        }),
        ttl,
        replicas: 0,
        renew,
        run,
        contender_from: Duration::ZERO,
        probe: None,
    }
}

/// Runs a round with the server's clock stepped by `step` (forward if positive).
async fn stepped(
    ttl: Duration,
    renew: bool,
    run: Duration,
    forward: bool,
    by: Duration,
) -> Timeline {
    let (server, clock) = ShiftedClock::server();
    let clock = Arc::new(clock);
    let (timeline, _guard) = belief::round(round(server.url(), ttl, renew, run), move || {
        if forward {
            clock.step_forward(by)
        } else {
            clock.step_back(by)
        }
    })
    .await;
    eprintln!("{}", timeline.summary());
    timeline
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_holder_is_told_soon_after_a_step_forward_expired_its_lock() {
    // ttl 6 s: renewed every 2 s, so the next renewal alone would tell it up to 2 s late.
    let t = stepped(
        Duration::from_secs(6),
        true,
        Duration::from_secs(4),
        true,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        !t.taken.is_empty(),
        "the step expires the lock: {}",
        t.summary()
    );
    assert!(t.lost.is_some(), "the holder is told: {}", t.summary());
    assert!(t.worst_overlap() <= TOLD_WITHIN, "{}", t.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_without_renewal_is_told_soon_after_a_step_forward_expired_its_lock() {
    // No renewal: nothing but the clock check contacts the server before the lease runs out.
    let t = stepped(
        Duration::from_secs(8),
        false,
        Duration::from_secs(4),
        true,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        !t.taken.is_empty(),
        "the step expires the lock: {}",
        t.summary()
    );
    assert!(t.lost.is_some(), "the holder is told: {}", t.summary());
    assert!(t.worst_overlap() <= TOLD_WITHIN, "{}", t.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_keeps_the_lock_and_tells_nobody_it_was_lost() {
    // The key outlives the lease on the server (safe: nobody else can take it meanwhile).
    let t = stepped(
        Duration::from_secs(3),
        true,
        Duration::from_secs(4),
        false,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        t.taken.is_empty(),
        "nobody else takes the lock: {}",
        t.summary()
    );
    assert!(t.lost.is_none(), "the holder keeps it: {}", t.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_holder_is_told_soon_after_a_step_forward_on_its_master() {
    // Every node on one stepped clock (one host); the step stays under the node timeout (15 s)
    // so the cluster itself stays healthy.
    let clock = Arc::new(ShiftedClock::new());
    let cluster = RedisCluster::start_with(3, 0, clock.options());
    let urls = cluster.urls();
    let round = round_with(
        move || Config::cluster(urls.clone()),
        Duration::from_secs(6),
        true,
        Duration::from_secs(4),
    );
    let stepping = clock.clone();
    let (t, _guard) =
        belief::round(round, move || stepping.step_forward(Duration::from_secs(9))).await;
    eprintln!("{}", t.summary());
    assert!(
        !t.taken.is_empty(),
        "the step expires the lock: {}",
        t.summary()
    );
    assert!(t.lost.is_some(), "the holder is told: {}", t.summary());
    assert!(t.worst_overlap() <= TOLD_WITHIN, "{}", t.summary());
}

/// A RedLock quorum of three masters, the first `stepped` of them on a clock the round steps.
async fn redlock_round(stepped: usize) -> Timeline {
    let clock = Arc::new(ShiftedClock::new());
    let masters: Vec<RedisServer> = (0..3)
        .map(|i| match i < stepped {
            true => RedisServer::start_with(clock.options()),
            false => RedisServer::start(),
        })
        .collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let round = round_with(
        move || Config::redlock(urls.clone()),
        Duration::from_secs(6),
        true,
        Duration::from_secs(4),
    );
    let stepping = clock.clone();
    let (t, _guard) = belief::round(round, move || {
        stepping.step_forward(Duration::from_secs(60))
    })
    .await;
    eprintln!("{}", t.summary());
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_step_on_a_majority_of_masters_is_told() {
    let t = redlock_round(2).await;
    assert!(
        !t.taken.is_empty(),
        "the step expires a majority: {}",
        t.summary()
    );
    assert!(t.lost.is_some(), "the holder is told: {}", t.summary());
    assert!(t.worst_overlap() <= TOLD_WITHIN, "{}", t.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_step_on_a_minority_of_masters_keeps_the_lock() {
    let t = redlock_round(1).await;
    assert!(
        t.taken.is_empty(),
        "a minority cannot grant it: {}",
        t.summary()
    );
    assert!(t.lost.is_none(), "the holder keeps it: {}", t.summary());
}
