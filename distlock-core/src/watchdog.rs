//! The watchdog: one task per client renews every `renew` lease in batched script calls.
//!
//! Each lease is renewed every ttl/3. When the watchdog wakes for the earliest due lease it also
//! takes every lease that is at least half-way to its next renewal, so leases taken at different
//! moments fall into the same batches and round trips grow with `held / batch size`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::connection::{CallError, Connection};
use crate::error::{is_error_reply, LossReason};
use crate::lease::{guaranteed_until, millis_ceil, Lease};
use crate::scripts::RENEW_SCRIPT;

/// Retry delay after a failed renewal round trip.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);

struct Entry {
    key: Arc<str>,
    name: Arc<str>,
    owner: Arc<str>,
    ttl: Duration,
    due: Instant,
    hold_until: Option<Instant>,
    lease: Arc<Lease>,
}

impl Entry {
    fn interval(&self) -> Duration {
        self.ttl / 3
    }
}

#[derive(Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    next_id: u64,
}

struct Shared {
    table: Mutex<Table>,
    wake: Notify,
}

/// What one lease asks of the watchdog.
pub(crate) struct Renewal {
    pub(crate) key: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) hold_until: Option<Instant>,
    pub(crate) lease: Arc<Lease>,
}

/// Handle to a client's renewal task; dropping it stops the task.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    task: Mutex<AbortHandle>,
    conn: Arc<Connection>,
    handle: Handle,
    batch: usize,
    timeout: Duration,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task().abort();
    }
}

impl Watchdog {
    /// Starts the renewal task on `handle` (the client's own runtime).
    pub(crate) fn start(
        conn: Arc<Connection>,
        handle: Handle,
        batch: usize,
        timeout: Duration,
    ) -> Self {
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::default()),
            wake: Notify::new(),
        });
        let task = spawn(&handle, &shared, &conn, batch, timeout);
        Watchdog {
            shared,
            task: Mutex::new(task),
            conn,
            handle,
            batch,
            timeout,
        }
    }

    fn task(&self) -> std::sync::MutexGuard<'_, AbortHandle> {
        self.task.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Restarts the renewal task if it is gone (it panicked, or its runtime stopped), so a
    /// dead watchdog never silently leaves leases to run out. Their deadlines still hold:
    /// a lease that was not renewed in time is reported lost whatever happened here.
    fn ensure_running(&self) {
        let mut task = self.task();
        if task.is_finished() {
            tracing::error!("the renewal task had stopped; restarting it");
            *task = spawn(
                &self.handle,
                &self.shared,
                &self.conn,
                self.batch,
                self.timeout,
            );
        }
    }

    /// Starts renewing a lease; returns the id to [`Watchdog::unregister`] it with.
    pub(crate) fn register(&self, r: Renewal) -> u64 {
        self.ensure_running();
        let due = Instant::now() + r.ttl / 3;
        let id = {
            let mut table = self.table();
            table.next_id += 1;
            let id = table.next_id;
            table.entries.insert(
                id,
                Entry {
                    key: r.key,
                    name: r.name,
                    owner: r.owner,
                    ttl: r.ttl,
                    due,
                    hold_until: r.hold_until,
                    lease: r.lease,
                },
            );
            id
        };
        // A stored permit: the task re-plans even if it is between two waits.
        self.shared.wake.notify_one();
        id
    }

    /// Stops renewing a lease at once (the next batch will not contain it).
    pub(crate) fn unregister(&self, id: u64) {
        self.table().entries.remove(&id);
    }

    /// Number of leases being renewed.
    pub(crate) fn len(&self) -> usize {
        self.table().entries.len()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.shared.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn spawn(
    handle: &Handle,
    shared: &Arc<Shared>,
    conn: &Arc<Connection>,
    batch: usize,
    timeout: Duration,
) -> AbortHandle {
    let task = run(shared.clone(), conn.clone(), batch, timeout);
    handle.spawn(task).abort_handle()
}

struct Due {
    id: u64,
    key: Arc<str>,
    name: Arc<str>,
    owner: Arc<str>,
    ttl: Duration,
    lease: Arc<Lease>,
}

/// Takes the leases due now (or at least half-way there); returns them and the next wake time.
fn collect(shared: &Shared, now: Instant) -> (Vec<Due>, Option<Instant>) {
    let mut table = shared.table.lock().unwrap_or_else(|e| e.into_inner());
    let mut due = Vec::new();
    let mut next: Option<Instant> = None;
    table.entries.retain(|&id, e| {
        if let Some(reason) = e.lease.lost_reason() {
            tracing::debug!(key = %e.name, %reason, "lease lost; renewal stopped");
            return false;
        }
        if e.due > now + e.interval() / 2 {
            next = Some(next.map_or(e.due, |n: Instant| n.min(e.due)));
            return true;
        }
        let mut ttl = e.ttl;
        let mut last = false;
        if let Some(cap) = e.hold_until {
            let left = cap.saturating_duration_since(now);
            if left <= ttl {
                // The final renewal, up to the cap; then the lease elapses.
                tracing::info!(key = %e.name, "hold time cap reached; last renewal");
                e.lease.stop_renewing();
                (ttl, last) = (left, true);
            }
        }
        if ttl >= Duration::from_millis(1) {
            due.push(Due {
                id,
                key: e.key.clone(),
                name: e.name.clone(),
                owner: e.owner.clone(),
                ttl,
                lease: e.lease.clone(),
            });
        }
        if last {
            return false;
        }
        e.due = now + e.interval();
        next = Some(next.map_or(e.due, |n: Instant| n.min(e.due)));
        true
    });
    (due, next)
}

async fn run(shared: Arc<Shared>, conn: Arc<Connection>, batch: usize, timeout: Duration) {
    let mut batches = 0u64;
    loop {
        let (due, next) = collect(&shared, Instant::now());
        if due.is_empty() {
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = shared.wake.notified() => {}
                    }
                }
                None => shared.wake.notified().await,
            }
            continue;
        }
        for chunk in due.chunks(batch) {
            batches += 1;
            renew_chunk(&shared, &conn, chunk, timeout, &format!("b{batches}")).await;
        }
    }
}

async fn renew_chunk(
    shared: &Shared,
    conn: &Arc<Connection>,
    chunk: &[Due],
    timeout: Duration,
    batch_id: &str,
) {
    let mut cmd = RENEW_SCRIPT.evalsha();
    cmd.arg(chunk.len());
    for d in chunk {
        cmd.arg(&*d.key);
    }
    cmd.arg(batch_id);
    for d in chunk {
        cmd.arg(millis_ceil(d.ttl)).arg(&*d.owner);
    }
    let sent_at = Instant::now();
    let reply = conn
        .call::<Vec<i64>>(&RENEW_SCRIPT, &cmd, batch_id, timeout)
        .await;
    let mut table = shared.table.lock().unwrap_or_else(|e| e.into_inner());
    match reply {
        Ok(statuses) if statuses.len() == chunk.len() => {
            for (d, status) in chunk.iter().zip(statuses) {
                d.lease.set_refused(false);
                let lost = match status {
                    1 => {
                        d.lease.extend(guaranteed_until(sent_at, d.ttl));
                        continue;
                    }
                    0 => LossReason::Expired,
                    // -1: another owner; -2: the key was overwritten with something else.
                    _ => LossReason::Stolen,
                };
                // Released while the batch was in flight: not a loss.
                if table.entries.remove(&d.id).is_some() && d.lease.mark_lost(lost) {
                    tracing::warn!(key = %d.name, reason = %lost, "lock lost: renewal found it no longer ours");
                }
            }
        }
        failed => {
            // An error reply means Redis is there but will not renew (READONLY, NOPERM, OOM,
            // ...): if that lasts until the lease runs out, the loss says so.
            let refused = matches!(&failed, Err(CallError::Redis(e)) if is_error_reply(e));
            let why = match failed {
                Ok(_) => "reply of the wrong length".to_owned(),
                Err(CallError::Redis(e)) => e.to_string(),
                Err(CallError::Timeout) => format!("no reply within {timeout:?}"),
            };
            let retry = Instant::now() + RETRY_AFTER_ERROR;
            for d in chunk {
                d.lease.set_refused(refused);
                tracing::warn!(key = %d.name, error = %why, "lease renewal failed; retrying");
                if let Some(e) = table.entries.get_mut(&d.id) {
                    e.due = e.due.min(retry);
                }
            }
        }
    }
}
