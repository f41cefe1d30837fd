//! Counts the background work a client has in flight (cleanup releases, unsubscribes), so
//! callers and tests can tell when a client is at rest.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;

/// A shared counter of spawned cleanup tasks.
#[derive(Clone, Default)]
pub(crate) struct Background(Arc<AtomicUsize>);

struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Background {
    /// Spawns `task` on `handle`, counted until it finishes (or the runtime drops it).
    pub(crate) fn spawn<F>(&self, handle: &Handle, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.0.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.0.clone());
        // If the runtime is shutting down the task (and `running`) is dropped: count stays right.
        drop(handle.spawn(async move {
            let _running = running;
            task.await;
        }));
    }

    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}
