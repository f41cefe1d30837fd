//! The client's own runtime thread: where the watchdog, the release subscriber connection and
//! every cleanup task live, so none of them dies with the runtime of whoever happened to call
//! `init` (each `#[tokio::test]` has its own runtime, and a runtime that shuts down takes its
//! tasks along).
//!
//! redis-rs spawns connection drivers and reconnects with `tokio::spawn` in whatever runtime
//! context is current; [`Background::enter`] makes this thread's runtime the current one while
//! a future is polled, so what it spawns lands here.
//!
//! The command connection is deliberately *not* moved here: a driver on another thread costs a
//! cross-thread wake-up per request each way (measured: B1 fell from 0.95x to 0.66x of the
//! floor). It lives on the runtime that made (or last re-made) it; if that runtime shuts down,
//! the next call fails as a dropped connection before reaching Redis, the connection manager
//! reconnects from the runtime that is asking (the watchdog's calls from this thread), and the
//! call is retried once (acquire, release) or after a short delay (renewal). redis-rs runs a
//! reconnect on the runtime that made the connection and shares it among callers, so the
//! command connection retries nothing inside a reconnect (a retry's backoff timer would belong
//! to that runtime, and polling it from another once that runtime is gone panics, printing the
//! panic's message even though it is caught); the callers retry. A connect still in progress
//! when its runtime shut down can leave its connect timer the same way: `connection` catches
//! that panic and replaces the connection.
//!
//! The masters of a RedLock quorum are different: each call fans out to every master, a dead
//! master is always reconnecting, and a failed master counts against the majority instead of
//! being retried. Their connections are polled with this runtime entered, so they live here;
//! so do the requests still out when their call is decided, after their caller (`stragglers`).
//!
//! It also counts the cleanup tasks in flight (releases, unsubscribes), so callers and tests
//! can tell when a client is at rest, and so a caller's runtime shutting down waits for the
//! work its tasks started (`callers`). When the client is dropped, the thread finishes that
//! work (within the same bound) before it stops.

mod callers;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

use crate::sync;
use callers::{with_caller, CallerWork, Callers};

/// A client's runtime thread and its count of cleanup tasks. Cheap to clone; the thread stops
/// when the last clone is dropped, once its work is done.
#[derive(Clone)]
pub(crate) struct Background(Arc<Shared>);

struct Shared {
    handle: Handle,
    count: Arc<Count>,
    /// The runtimes of callers that started work, each waited for when it shuts down.
    callers: Callers,
    /// Dropped (with `Shared`) to stop the thread.
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.callers.close();
        if let Some(stop) = sync::lock(&self.stop).take() {
            let _ = stop.send(());
        }
    }
}

/// Cleanup tasks in flight, and who waits for none to be ([`Background::settle`]).
#[derive(Default)]
struct Count {
    tasks: AtomicUsize,
    idle: Notify,
}

impl Count {
    /// Resolves once no cleanup task is in flight.
    async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            let mut idle = std::pin::pin!(idle);
            // Registered before the count is read: a task ending in between still wakes it.
            idle.as_mut().enable();
            if self.tasks.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// One piece of background work, counted in [`Background::count`] (and in the work of the
/// caller's runtime that started it) until dropped.
pub(crate) struct Running {
    all: Arc<Count>,
    caller: Option<Arc<CallerWork>>,
}

impl Running {
    /// Runs `f` with the background work it starts counted like this one.
    pub(crate) fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        with_caller(&self.caller, f)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(caller) = &self.caller {
            caller.done();
        }
        if self.all.tasks.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Starts the runtime thread (a current-thread runtime with I/O and timers). `bound`: how
    /// long a caller's runtime shutting down, or the client dropped, waits for the work in
    /// flight, at most.
    pub(crate) fn start(bound: Duration) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let count = Arc::<Count>::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let work = count.clone();
        std::thread::Builder::new()
            .name("distlock-client".to_owned())
            .spawn(move || {
                // Runs every task of the client until the client is dropped, then what is
                // still in flight (a release sent just before).
                runtime.block_on(async {
                    let _ = stopped.await;
                    let _ = tokio::time::timeout(bound, work.idle()).await;
                });
            })?;
        Ok(Background(Arc::new(Shared {
            callers: Callers::new(handle.id(), bound),
            handle,
            count,
            stop: Mutex::new(Some(stop)),
        })))
    }

    /// Watches the caller's runtime from now on (see `callers`), as its first background
    /// work would: called when a client connects, so the watch's thread is running long
    /// before that runtime shuts down (tokio drops a blocking task that has not started when
    /// it shuts down).
    pub(crate) fn watch_caller(&self) {
        drop(self.0.callers.current());
    }

    /// The runtime's handle, for spawning long-lived tasks (the watchdog).
    pub(crate) fn handle(&self) -> &Handle {
        &self.0.handle
    }

    /// Runs a long-lived `task` here (the watchdog's kind: not counted as cleanup work, so a
    /// runtime that shuts down does not wait for it); abort it through the returned handle.
    pub(crate) fn spawn_task<F>(&self, task: F) -> tokio::task::AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.0.handle.spawn(task).abort_handle()
    }

    /// Spawns a cleanup `task`, counted until it finishes (or the client is dropped).
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let running = self.track();
        drop(self.0.handle.spawn(async move {
            let mut task = std::pin::pin!(task);
            // What it starts belongs to its caller's work too.
            std::future::poll_fn(|cx| with_caller(&running.caller, || task.as_mut().poll(cx)))
                .await;
        }));
    }

    /// Counts background work done outside this runtime's tasks (a release sent without
    /// waiting, answered in the task that sent its group) until the returned value is dropped.
    pub(crate) fn track(&self) -> Running {
        self.0.count.tasks.fetch_add(1, Ordering::AcqRel);
        let caller = self.0.callers.current();
        if let Some(caller) = &caller {
            caller.start();
        }
        Running {
            all: self.0.count.clone(),
            caller,
        }
    }

    /// Polls `task` once, now, on the caller's thread with this runtime entered, then leaves
    /// the rest to a cleanup task here (counted like [`Background::spawn`]). Whatever the first
    /// poll sends is queued on its connection before this returns, so it goes out before
    /// anything the caller sends next; its timers and whatever redis-rs spawns belong to this
    /// runtime, so the rest does not depend on the caller's.
    pub(crate) fn spawn_started<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut task = self.enter(task);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if Pin::new(&mut task).poll(&mut cx).is_pending() {
            self.spawn(task);
        }
    }

    /// Runs `fut` on the caller's task with this runtime as the current one while it is
    /// polled, so whatever redis-rs spawns or registers (drivers, reconnects, sockets) lives
    /// on the client's thread.
    pub(crate) fn enter<F: Future>(&self, fut: F) -> OnClientRuntime<F> {
        OnClientRuntime {
            handle: self.0.handle.clone(),
            fut: Box::pin(fut),
        }
    }

    /// Cleanup tasks in flight.
    pub(crate) fn count(&self) -> usize {
        self.0.count.tasks.load(Ordering::Acquire)
    }

    /// Resolves once no cleanup task is in flight.
    pub(crate) async fn settle(&self) {
        self.0.count.idle().await;
    }
}

/// A future polled with the client's runtime entered (see [`Background::enter`]).
pub(crate) struct OnClientRuntime<F> {
    handle: Handle,
    fut: Pin<Box<F>>,
}

impl<F: Future> Future for OnClientRuntime<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.handle.enter();
        this.fut.as_mut().poll(cx)
    }
}
