//! The concurrency checks' side of `sync` (built with `--cfg shuttle` only): a clock that only a
//! check moves, timers on it, and the seeded bugs a check switches on to show it catches them.
//!
//! Shuttle runs every task of a check on the test's own thread (each on a stack of its own), so
//! the clock and the seeded bug are that thread's: tests running side by side do not share them.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// A bug seeded into the checked code (`sync::mutant!`), one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutant {
    /// `Lease::lost` reads the state before it registers for the change (a lost wake-up).
    StateReadBeforeWaiting,
    /// `Lease::end_belief` records `Released` over a loss already recorded.
    BeliefOverwritesLoss,
    /// A carried waiter that goes away leaves the queue at once, before the release that
    /// carries it is answered (its leaving overtakes its queuing).
    LeaveOvertakesCarry,
    /// A release that carried a waiter failed, and the waiter is not promoted (its count is
    /// given back, its fate left carried).
    NoPromotionOnFailedCarry,
    /// A release that carried a waiter failed, and the waiter, gone meanwhile, does not leave
    /// the queue (where that release, or an attempt of its own, may have put it).
    FailedCarryLeftBehind,
    /// A waiter that waits in the client and goes away while an attempt of its own that
    /// queued it is out does not leave the queue (the cohort never knew it got there).
    OwnAttemptNotLeft,
    /// A waiter that goes away keeps its turn (the permit is leaked, not handed on).
    TurnKeptOnDrop,
    /// A waiter retries without waiting in line for its turn (it barges).
    TurnBarges,
    /// A release's grant reaches its slot, but the waiter is not woken.
    GrantNotWoken,
    /// A waiter takes the counts it waits to see move after its attempt, not before.
    BaselineAfterAttempt,
}

struct Clock {
    base: Instant,
    offset: Mutex<Duration>,
    moved: Notify,
}

thread_local! {
    static CLOCK: RefCell<Option<Arc<Clock>>> = const { RefCell::new(None) };
    static MUTANT: Cell<Option<Mutant>> = const { Cell::new(None) };
}

/// Seeds `mutant` (or none) into the code this thread's checks drive.
pub(crate) fn set_mutant(mutant: Option<Mutant>) {
    MUTANT.with(|m| m.set(mutant));
}

/// True if `mutant` is seeded (see [`set_mutant`]).
pub(crate) fn is_mutant(mutant: Mutant) -> bool {
    MUTANT.with(|m| m.get() == Some(mutant))
}

/// A stopped clock for one execution of a check: it moves only by [`advance`].
pub(crate) fn reset_clock() {
    let clock = Arc::new(Clock {
        base: Instant::now(),
        offset: Mutex::default(),
        moved: Notify::new(),
    });
    CLOCK.with(|c| *c.borrow_mut() = Some(clock));
}

fn clock() -> Arc<Clock> {
    CLOCK.with(|c| {
        c.borrow()
            .clone()
            .expect("a check calls sync::model::reset_clock first")
    })
}

/// Now, on the check's clock.
pub(crate) fn now() -> Instant {
    let clock = clock();
    let offset = *clock
        .offset
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    clock.base + offset
}

/// Moves the check's clock on by `by`, waking the timers it passes.
pub(crate) fn advance(by: Duration) {
    let clock = clock();
    *clock
        .offset
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) += by;
    clock.moved.notify_waiters();
}

/// Resolves once the check's clock reaches `deadline`.
pub(crate) async fn sleep_until(deadline: Instant) {
    let clock = clock();
    loop {
        let moved = clock.moved.notified();
        let mut moved = std::pin::pin!(moved);
        moved.as_mut().enable();
        if now() >= deadline {
            return;
        }
        moved.await;
    }
}

/// A timeout on the check's clock ran out (as tokio's `Elapsed`).
#[derive(Debug)]
pub(crate) struct Elapsed;

/// `fut`, unless the check's clock reaches `deadline` first (polled first, as tokio's).
pub(crate) async fn timeout_at<F: Future>(deadline: Instant, fut: F) -> Result<F::Output, Elapsed> {
    let mut fut = std::pin::pin!(fut);
    let mut sleep = std::pin::pin!(sleep_until(deadline));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// How a check explores the interleavings of its tasks. (Not depth first: shuttle's DFS
/// schedules every step of every task, and a check of even one waiter, its holder and the
/// subscriber's delivery did not finish 300,000 schedules; the schedulers below bound the
/// preemptions instead, or pick each step at random.)
///
/// Each exploration draws its schedules from a seed, the same each run unless
/// `SHUTTLE_RANDOM_SEED` (that one, for every exploration of the run) or
/// `DISTLOCK_SHUTTLE_FRESH` (a fresh one each) is set: a failure prints it, with the command
/// that explores the same interleavings again.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Explore {
    /// Probabilistic concurrency testing: `iterations` schedules, each with up to `depth`
    /// preemptions placed at random (a bug that needs `depth` preemptions is found by one
    /// schedule with probability at least 1/(n·k^(depth−1)), n tasks and k steps).
    Pct { depth: usize, iterations: usize },
    /// `iterations` uniformly random schedules.
    Random(usize),
    /// `iterations` uniformly random schedules from `seed`, the first of them `seed`'s own:
    /// the execution a random exploration printed as its "failing seed", replayed (as far as
    /// the checked code still takes the same steps; where a change made it take others, the
    /// schedule goes on at random from there).
    Seeded { seed: u64, iterations: usize },
}

impl Explore {
    fn iterations(self) -> usize {
        match self {
            Explore::Pct { iterations, .. }
            | Explore::Random(iterations)
            | Explore::Seeded { iterations, .. } => iterations,
        }
    }

    /// `DISTLOCK_SHUTTLE_SCALE` times as many schedules (a soak; a seeded replay stays as it
    /// is).
    fn scaled(self) -> Explore {
        let scale: usize = std::env::var("DISTLOCK_SHUTTLE_SCALE")
            .map(|s| s.parse().expect("DISTLOCK_SHUTTLE_SCALE is a whole number"))
            .unwrap_or(1);
        match self {
            Explore::Pct { depth, iterations } => Explore::Pct {
                depth,
                iterations: iterations * scale,
            },
            Explore::Random(iterations) => Explore::Random(iterations * scale),
            seeded @ Explore::Seeded { .. } => seeded,
        }
    }
}

/// The seed every exploration starts from unless told otherwise: the suite explores the same
/// interleavings each run, so a red run is the code's doing and a rerun replays it.
const SEED: u64 = 0x0d15_710c_5eed;

/// The seed of an exploration: `SHUTTLE_RANDOM_SEED`'s (which shuttle's schedulers read too);
/// a fresh one with `DISTLOCK_SHUTTLE_FRESH` set (a soak looking for interleavings no run
/// tried yet: `scripts/shuttle.sh --fresh`); else a replay's own, or [`SEED`].
fn seed(how: Explore) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    if let Some(seed) = shuttle_seed() {
        return seed;
    }
    if let Explore::Seeded { seed, .. } = how {
        return seed;
    }
    if std::env::var_os("DISTLOCK_SHUTTLE_FRESH").is_some() {
        return std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
    }
    SEED
}

fn shuttle_seed() -> Option<u64> {
    let seed = std::env::var("SHUTTLE_RANDOM_SEED").ok()?;
    Some(seed.parse().expect("SHUTTLE_RANDOM_SEED is a u64"))
}

fn runner(
    how: Explore,
    seed: u64,
    config: shuttle::Config,
) -> impl FnOnce(Box<dyn Fn() + Send + Sync>) -> usize {
    use shuttle::scheduler::{PctScheduler, RandomScheduler};
    use shuttle::Runner;
    move |f| match how {
        Explore::Pct { depth, iterations } => {
            let pct = PctScheduler::new_from_seed(seed, depth, iterations);
            Runner::new(pct, config).run(f)
        }
        Explore::Random(iterations) | Explore::Seeded { iterations, .. } => {
            Runner::new(RandomScheduler::new_from_seed(seed, iterations), config).run(f)
        }
    }
}

/// Runs the check `f` (of `what`: the setup, printed with a failure) over every interleaving
/// `how` chooses (`DISTLOCK_SHUTTLE_SCALE` times as many, if set), none seeded with a bug; a
/// failing interleaving panics with the schedule that replays it (`shuttle::replay`), and with
/// the seed and command that explore the same interleavings again.
pub(crate) fn explore(
    how: Explore,
    what: &dyn std::fmt::Debug,
    f: impl Fn() + Send + Sync + 'static,
) {
    let how = how.scaled();
    set_mutant(None);
    let seed = seed(how);
    let started = std::time::Instant::now();
    let run = runner(how, seed, shuttle::Config::new());
    let runs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(Box::new(f))));
    let Ok(runs) = runs else {
        let test = std::thread::current().name().unwrap_or("<test>").to_owned();
        let first = match how {
            Explore::Pct { .. } => "",
            _ => ", or, with the failing seed above, at its first interleaving",
        };
        eprintln!(
            "shuttle: {test} failed on {what:?} ({how:?}, seed {seed}); the same interleavings \
             again (the failure at the same one{first}): \
             SHUTTLE_RANDOM_SEED={seed} scripts/shuttle.sh {test} --exact"
        );
        std::panic::resume_unwind(runs.unwrap_err());
    };
    eprintln!(
        "shuttle: {runs} interleavings of {what:?} ({how:?}, seed {seed}) in {:.1?}",
        started.elapsed()
    );
    assert_eq!(runs, how.iterations(), "shuttle stopped early");
}

/// True if the check `f`, with `mutant` seeded, fails in one of `iterations` interleavings
/// chosen by PCT (depth 3), or else in as many chosen at random (each stops at the first
/// failure, which shuttle reports with its schedule before it is caught here).
pub(crate) fn caught(
    mutant: Mutant,
    iterations: usize,
    f: impl Fn() + Send + Sync + 'static,
) -> bool {
    let hows = [
        Explore::Pct {
            depth: 3,
            iterations,
        },
        Explore::Random(iterations),
    ];
    fails(mutant, &hows, f)
}

/// True if the check `f`, with `mutant` seeded, fails in one of the interleavings `hows`
/// choose (tried in order; each stops at the first failure, which shuttle reports before it
/// is caught here).
pub(crate) fn fails(
    mutant: Mutant,
    hows: &[Explore],
    f: impl Fn() + Send + Sync + 'static,
) -> bool {
    eprintln!("shuttle: seeding {mutant:?} (the failure reported next is expected)");
    let f = std::sync::Arc::new(f);
    set_mutant(Some(mutant));
    let failed = hows.iter().any(|&how| {
        let mut config = shuttle::Config::new();
        config.failure_persistence = shuttle::FailurePersistence::None;
        let run = runner(how, seed(how), config);
        let f = f.clone();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(Box::new(move || f()))))
            .is_err()
    });
    set_mutant(None);
    failed
}
