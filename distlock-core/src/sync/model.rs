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
    let offset = *crate::sync::lock(&clock.offset);
    clock.base + offset
}

/// Moves the check's clock on by `by`, waking the timers it passes.
pub(crate) fn advance(by: Duration) {
    let clock = clock();
    *crate::sync::lock(&clock.offset) += by;
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
#[derive(Debug, Clone, Copy)]
pub(crate) enum Explore {
    /// Probabilistic concurrency testing: `iterations` schedules, each with up to `depth`
    /// preemptions placed at random (a bug that needs `depth` preemptions is found by one
    /// schedule with probability at least 1/(n·k^(depth−1)), n tasks and k steps).
    Pct { depth: usize, iterations: usize },
    /// `iterations` uniformly random schedules.
    Random(usize),
}

fn runner(
    how: Explore,
    config: shuttle::Config,
) -> impl FnOnce(Box<dyn Fn() + Send + Sync>) -> usize {
    use shuttle::scheduler::{PctScheduler, RandomScheduler};
    use shuttle::Runner;
    move |f| match how {
        Explore::Pct { depth, iterations } => {
            Runner::new(PctScheduler::new(depth, iterations), config).run(f)
        }
        Explore::Random(iterations) => Runner::new(RandomScheduler::new(iterations), config).run(f),
    }
}

/// Runs the check `f` over the interleavings `how` chooses, none seeded with a bug; a failing
/// interleaving panics with the schedule that replays it. Returns the interleavings run.
pub(crate) fn explore(how: Explore, f: impl Fn() + Send + Sync + 'static) -> usize {
    set_mutant(None);
    let started = std::time::Instant::now();
    let runs = runner(how, shuttle::Config::new())(Box::new(f));
    eprintln!(
        "shuttle: {runs} interleavings ({how:?}) in {:.1?}",
        started.elapsed()
    );
    runs
}

/// True if the check `f`, with `mutant` seeded, fails in one of `iterations` interleavings
/// chosen by PCT (depth 3), or else in as many chosen at random (each stops at the first
/// failure, which shuttle reports with its schedule before it is caught here).
pub(crate) fn caught(
    mutant: Mutant,
    iterations: usize,
    f: impl Fn() + Send + Sync + 'static,
) -> bool {
    eprintln!("shuttle: seeding {mutant:?} (the failure reported next is expected)");
    let f = std::sync::Arc::new(f);
    set_mutant(Some(mutant));
    let hows = [
        Explore::Pct {
            depth: 3,
            iterations,
        },
        Explore::Random(iterations),
    ];
    let failed = hows.into_iter().any(|how| {
        let mut config = shuttle::Config::new();
        config.failure_persistence = shuttle::FailurePersistence::None;
        let run = runner(how, config);
        let f = f.clone();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(Box::new(move || f()))))
            .is_err()
    });
    set_mutant(None);
    failed
}
