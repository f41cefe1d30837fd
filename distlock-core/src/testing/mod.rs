//! Testing code that takes distributed locks (feature `testing`): throwaway Redis servers that
//! stop with the test process, with the default client installed on one, and the faults that
//! take a lock from the code under test, so a test can walk the path nobody tests: the lock
//! lost while the body runs.
//!
//! ```no_run
//! # use distlock_core as distlock;
//! #[tokio::test]
//! async fn settles_once() {
//!     let redis = distlock::testing::init().await; // the first test starts the server
//!     // ... call the code under test, which takes its locks through the default client
//!     assert!(!redis.is_locked("order:42").await);
//! }
//! ```
//!
//! The first call of [`init`] starts the server and installs the client. Every
//! `#[tokio::test]` function may call it, and they share the server (give each test its own
//! lock names, as tests run in parallel). The client outlives the runtime of the test that
//! installed it (each `#[tokio::test]` has its own), so later tests use it as it is.
//! [`TestRedis::start`] starts a private server, stopped when dropped, for a test that needs one
//! of its own (install a named client on it with `redis.config().install_as("name")`), and
//! [`TestSentinel::start`] a Redis Sentinel deployment, and [`TestCluster::start`] a Redis
//! Cluster of 3 masters (each fault of one lock made on the node that owns its slot).
//!
//! Servers listen on a free loopback port, keep nothing on disk (`--save ""`, no AOF) and stop
//! when their test process exits, however it exits: each runs under a small `sh` that kills it
//! when the test process's end of a pipe closes. It needs `redis-server` on the `PATH` (or its
//! path in `REDIS_SERVER`) and a Unix `sh`.
//!
//! ## Faults
//!
//! Each fault is made on the real server, and the holder is told as after the real thing:
//! `run` and `#[distributed_lock]` cancel the body at its next `.await` and return
//! [`Error::Lost`](crate::Error::Lost) with the reason, a guard's
//! [`lost()`](crate::LockGuard::lost) resolves with it, and [`ensure_held`](crate::ensure_held)
//! fails. `docs/testing.md` in the repository has a complete test file that uses each of them.
//!
//! | fault | on the server | the holder is told |
//! | --- | --- | --- |
//! | [`TestRedis::expire_lock`] | the lock's key deleted, as its lease running out there would (an expiry, an eviction, a restart without persistence) | [`Expired`](crate::LossReason::Expired), within a round trip |
//! | [`TestRedis::steal_lock`] | the key deleted and the lock taken by another owner, fenced: a [`NewHolder`], whose [`fence`](NewHolder::fence) makes a [`FencedStore`](crate::fence::redis::FencedStore) refuse the old holder's writes ([`Error::Fenced`](crate::Error::Fenced)) | [`Stolen`](crate::LossReason::Stolen), within a round trip (see its docs for a rare `Expired`) |
//! | [`TestRedis::pause`], [`TestRedis::pause_for`] | the `redis-server` process stopped (`SIGSTOP`) until the guard is dropped: nothing answers, and a key whose date passes meanwhile is gone when it thaws | [`Unreachable`](crate::LossReason::Unreachable) when its lease runs out ([`LeaseElapsed`](crate::LossReason::LeaseElapsed) without `renew`) |
//! | [`TestRedis::step_clock`] | the wall clock stepped forward: every key's expiry that much earlier, and the clients' server checks read the clock that much ahead | [`Expired`](crate::LossReason::Expired) within a round trip, for a lock the step expired; a lock with more left is kept |
//! | [`TestSentinel::failover`], [`TestSentinel::failover_seen_by`] | `SENTINEL FAILOVER`: the replica promoted | nothing, for a lock the replica had (`min_replicas`): the client confirms it on the new master |
//! | [`TestSentinel::failover_losing`] | a failover to a replica that had not received the lock | [`Expired`](crate::LossReason::Expired), once the client follows the failover (it hears the sentinel's announcement, or asks every 500 ms) |
//! | [`TestRedis::crashable`], then [`Crashable::crash`] | a client of its own killed as `SIGKILL` kills its process: its Redis user switched off and its connections killed, so nothing it sends on the way out (a waiter leaving, a release, a renewal) arrives; its waiters stay queued ([`TestRedis::queued`] counts them) and its holds held until their lease runs out | nothing: the test asserts on the others (a live waiter behind any number of its waiters has the lock within one grant window, 1 s) |
//!
//! Faults of one lock (`expire_lock`, `steal_lock`) may be made on the shared server of
//! [`init`]; faults of the whole server (`pause`, `step_clock`) reach every test that uses it,
//! so make them on a private one.
//!
//! ### How the holder hears at once
//!
//! A lock deleted on the server is noticed by its holder at its next renewal, up to a third of
//! its ttl later, and without `renew` not at all (a fenced write is then what refuses a stale
//! holder). The faults that lose locks in production are noticed sooner: a client follows a
//! Sentinel failover and confirms every lease on the new master, and it checks its servers'
//! clocks and run ids every [`Config::server_check`](crate::Config::server_check) (250 ms) and,
//! at a step or a restart, confirms every lease on the server at once. The kit shows its faults to those checks: with
//! the feature `testing` compiled in, the server check of every client in the process reads a
//! server as the kit says (its clock further ahead after [`TestRedis::step_clock`]; one more
//! request to confirm every lease after [`TestRedis::expire_lock`] and
//! [`TestRedis::steal_lock`]), telling servers apart by their run id, and is woken at once
//! instead of at its next period. So the holder is told within a round trip, through the code
//! path a real step takes. Without the feature none of this is compiled: a production build
//! pays nothing. A client with `server_check(None)`, or whose Redis user may not run `INFO`,
//! is not nudged: it hears at its next renewal.

mod clock;
mod cluster;
mod crash;
mod pause;
mod process;
mod sentinel;
mod server;
mod settle;
mod take_away;

pub use cluster::TestCluster;
pub use crash::Crashable;
pub use pause::Paused;
pub use sentinel::TestSentinel;
pub use server::TestRedis;
pub use take_away::{Locks, NewHolder};

use tokio::sync::OnceCell;

static SHARED: OnceCell<TestRedis> = OnceCell::const_new();

/// The test process's shared server, started by the first call, with the default client
/// installed on it (what [`crate::init`] does): call it at the start of every test that takes
/// locks through the default client. Later calls, from any test and any runtime, return the
/// same server.
///
/// # Panics
///
/// If the server cannot be started (the message says why, e.g. that `redis-server` is not
/// installed), or a default client was installed already by other means.
pub async fn init() -> &'static TestRedis {
    SHARED
        .get_or_init(|| async {
            let server = TestRedis::start().unwrap_or_else(|e| panic!("{e}"));
            if let Err(e) = server.config().install().await {
                panic!("distlock::testing::init: {e}");
            }
            server
        })
        .await
}
