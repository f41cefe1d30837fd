//! The callers' runtimes: the background work a runtime's tasks started is finished before that
//! runtime is gone, so a process that returns from `main` right after a locked call leaves no
//! lock behind, with no call of its own.
//!
//! A release that `run` (and so the attribute) sent without waiting, or that a dropped guard
//! started, is queued on a connection whose driver may live on the caller's runtime. When that
//! runtime shuts down (what `#[tokio::main]` does as `main` returns) tokio drops its tasks, the
//! driver among them: the request fails and is retried from the client's own runtime thread
//! ([`super::Background`]) — which the process then ends, mid-flight, unless something waits.
//!
//! So the runtime that connects a client, and any other the first time it starts background
//! work there, gets a watch: a task that never
//! completes, dropped (like every task) when the runtime shuts down, and a thread of the
//! runtime's blocking pool, which tokio waits for before the runtime is gone. When the task is
//! dropped, the thread waits until the runtime's other tasks are dropped too (what they held —
//! a connection's driver, a group being sent, a guard — has failed over to the client's thread
//! by then), and then for the work that runtime's callers started, within a bound (the time one
//! release and its retry may take). A runtime with nothing in flight shuts down at once.
//!
//! tokio drops a blocking task that has not started by the time its runtime shuts down, so a
//! runtime other than the connecting one whose very first background work comes just before
//! it shuts down may not be waited for. A runtime dropped with `shutdown_background` or
//! `shutdown_timeout` does not wait for its blocking pool, and so not for this either:
//! `distlock::shutdown` is for those exits.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Id};

use crate::sync;

thread_local! {
    /// The caller work that the background work running now on this thread belongs to: what
    /// it starts belongs there too (a release retried after its first answer, say), wherever
    /// it runs.
    static INHERITED: RefCell<Option<Arc<CallerWork>>> = const { RefCell::new(None) };
}

/// Runs `f` with the background work it starts counted in `caller`'s work.
pub(super) fn with_caller<R>(caller: &Option<Arc<CallerWork>>, f: impl FnOnce() -> R) -> R {
    if caller.is_none() {
        return f();
    }
    let outer = INHERITED.with(|inherited| inherited.replace(caller.clone()));
    // Restored even if `f` panics (a panicking task's work must not count where it runs next).
    struct Restore(Option<Arc<CallerWork>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            INHERITED.with(|inherited| *inherited.borrow_mut() = outer);
        }
    }
    let _restore = Restore(outer);
    f()
}

/// Every caller runtime that started background work of one client.
pub(super) struct Callers {
    /// The client's own runtime: its work needs no watch.
    own: Id,
    /// How long a runtime's shutdown waits, at most.
    bound: Duration,
    /// Each runtime's work, while the runtime lives (its watch holds the `Arc`).
    runtimes: Mutex<Vec<(Id, Weak<CallerWork>)>>,
}

impl Callers {
    pub(super) fn new(own: Id, bound: Duration) -> Callers {
        Callers {
            own,
            bound,
            runtimes: Mutex::new(Vec::new()),
        }
    }

    /// The caller work of the background work running now ([`with_caller`]), else that of
    /// the runtime the caller runs on (`None`: no runtime, or the client's own), watched from
    /// the first call on.
    pub(super) fn current(&self) -> Option<Arc<CallerWork>> {
        if let Some(inherited) = INHERITED.with(|inherited| inherited.borrow().clone()) {
            return Some(inherited);
        }
        let handle = Handle::try_current().ok()?;
        let id = handle.id();
        if id == self.own {
            return None;
        }
        let mut runtimes = sync::lock(&self.runtimes);
        if let Some(work) = runtimes
            .iter()
            .find(|(seen, _)| *seen == id)
            .and_then(|(_, work)| work.upgrade())
        {
            return Some(work);
        }
        runtimes.retain(|(_, work)| work.strong_count() > 0);
        let work = Arc::new(CallerWork::default());
        runtimes.push((id, Arc::downgrade(&work)));
        drop(runtimes);
        watch(&handle, work.clone(), self.bound);
        Some(work)
    }

    /// The client is gone: its watches end (their runtimes keep running).
    pub(super) fn close(&self) {
        for (_, work) in sync::lock(&self.runtimes).drain(..) {
            if let Some(work) = work.upgrade() {
                work.end(Ending::ClientGone);
            }
        }
    }
}

/// The background work one caller runtime started and that has not finished.
#[derive(Default)]
pub(crate) struct CallerWork {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    tasks: usize,
    ending: Option<Ending>,
    /// The watch task's, woken when the client is gone.
    waker: Option<Waker>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The runtime is shutting down: wait for its work.
    Runtime,
    /// The client was dropped: nothing to wait for here.
    ClientGone,
}

impl CallerWork {
    pub(super) fn start(&self) {
        sync::lock(&self.state).tasks += 1;
    }

    pub(super) fn done(&self) {
        let mut state = sync::lock(&self.state);
        state.tasks -= 1;
        // Only a watch whose runtime is ending waits for no work; before that it waits for the
        // end alone, and waking it whenever the work drains (each sent release, one at a time)
        // would switch to its thread for nothing.
        if state.tasks == 0 && state.ending.is_some() {
            self.changed.notify_all();
        }
    }

    fn end(&self, why: Ending) {
        let mut state = sync::lock(&self.state);
        state.ending.get_or_insert(why);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        self.changed.notify_all();
    }
}

/// Starts the watch of `work` on the runtime of `handle`.
fn watch(handle: &Handle, work: Arc<CallerWork>, bound: Duration) {
    let runtime = handle.clone();
    let waiting = work.clone();
    // A runtime that is already shutting down drops the task at once, and a pool that is
    // shutting down never runs the closure: either way nothing waits, as before.
    drop(handle.spawn_blocking(move || wait_out(&runtime, &waiting, bound)));
    drop(handle.spawn(Watch(work)));
}

/// On the runtime's blocking pool: once the runtime shuts down, waits (within `bound`) for its
/// other tasks to be dropped and then for its work.
fn wait_out(runtime: &Handle, work: &CallerWork, bound: Duration) {
    let mut state = sync::lock(&work.state);
    while state.ending.is_none() {
        state = sync::wait(&work.changed, state);
    }
    if state.ending == Some(Ending::ClientGone) {
        return;
    }
    drop(state);
    let deadline = Instant::now() + bound;
    // The tasks being dropped still hold what fails over to the client's thread when they
    // go (a driver and its queued requests): nothing to wait for before they are gone. tokio
    // signals none of this; its shutdown is short.
    while runtime.metrics().num_alive_tasks() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut state = sync::lock(&work.state);
    while state.tasks > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        state = sync::wait_timeout(&work.changed, state, left);
    }
}

/// The task that tells the watch its runtime is shutting down by being dropped; it completes
/// only when the client is gone.
struct Watch(Arc<CallerWork>);

impl Future for Watch {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = sync::lock(&self.0.state);
        if state.ending.is_some() {
            return Poll::Ready(());
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.end(Ending::Runtime);
    }
}
