//! The watchdog: one task per client renews every `renew` lease in batched script calls, and
//! confirms every lease again on the new master after a master switch.
//!
//! Each lease is renewed every ttl/3. When the watchdog wakes for the earliest due lease it also
//! takes every lease that is at least half-way to its next renewal, so leases taken at different
//! moments fall into the same batches and round trips grow with `held / batch size`.
//!
//! ## Master switches (Sentinel)
//!
//! A failover promotes a replica while the old master still accepts writes (until Sentinel
//! reconfigures it, seconds later), and a replica still attached to the old master still
//! acknowledges them: a renewal sent there after the promotion extends a key the new master
//! never sees. If it extended the holder's deadline, the holder would believe after the new
//! master let the key expire and another client took it. So every lease reply is checked
//! against the switch count (`Deployment::switches`): a reply that arrives after a switch it
//! was sent before extends nothing and decides nothing (it is retried on the new master), and
//! after every switch each lease of the client — renewed or not — is confirmed on the new
//! master at once, before it is renewed there: a renewed lease by a renewal, which sets the
//! new master's expiry to at least the holder's deadline; any other lease by an owner check
//! (a `RENEW` with a 1 ms ttl, which never extends), since its key, if there, carries the
//! expiry the acquire set. A lease the new master does not hold as ours is lost, and the
//! holder is told.
//!
//! ## Server clock steps and restarts
//!
//! A server whose wall clock steps forward expires its keys early, and one that restarts may
//! come back without them (`deploy::server_check`). Each step or restart the client sees counts
//! in the same epoch as master switches ([`epoch`]): a lease reply that crossed it counts for
//! nothing, and every lease is confirmed on the server at once, so a holder whose lock is gone
//! is told.
//!
//! What this relies on, and the crate docs state: the client hears of the switch (the
//! sentinels' `+switch-master`, or asking them every `CHECK_EVERY`) before the new master's
//! copy of the key runs out, which is at least 2/3 of the ttl after the promotion for a
//! renewed lease whose renewals reached the promoted replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::deploy::server_check::ServerCheck;
use crate::deploy::{CallError, Deployment};
use crate::error::{is_error_reply, LossReason};
use crate::lease::{self, guaranteed_until, renewal_interval, Lease};
use crate::metrics::{self, RenewalOutcome};
use crate::sync;
use crate::wire::calls::{RenewCall, RenewItem, Renewed};
use crate::wire::ids::ShortId;
use crate::wire::keys::hash_slot;
use crate::wire::request::ReplicaWait;

/// Retry delay after a failed renewal round trip.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);

/// A registered lease and when it is next due.
struct Entry {
    renewal: Arc<Renewal>,
    due: Instant,
    /// The master switch count under which the lease was last confirmed on the master (a
    /// reply to a request sent under it, and received under it).
    confirmed: u64,
    /// When a confirmation after a switch may be sent (again, after a failed one).
    retry_at: Instant,
    /// The renewal period now: a third of the ttl, or of a handed-over lock's window until
    /// its first renewal.
    period: Duration,
    /// The lease still runs on a handed-over lock's window, not on a ttl (until its first
    /// renewal): the margin that renewal finds is the window's, no sign of a late renewal.
    window: bool,
}

#[derive(Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    /// When the task looks at the table next, as it planned at its last look (`None`: not
    /// known, so a new lease wakes it). A lease due later need not wake it: it will be seen
    /// then. Read and written under the table's lock, so a lease registered after a look is
    /// either seen by it or sees its plan.
    planned: Option<Instant>,
}

struct Shared {
    table: Mutex<Table>,
    wake: Notify,
}

/// What one lease asks of the watchdog.
pub(crate) struct Renewal {
    /// The lock key, its owner and the ttl to renew with.
    pub(crate) item: RenewItem,
    /// Renew the lease (`renew`); false: only confirm it after a master switch.
    pub(crate) renew: bool,
    /// The master switch count when the acquire was sent.
    pub(crate) switches: u64,
    /// The lock's name, for logs.
    pub(crate) name: Arc<str>,
    /// Replicas that must acknowledge each renewal (`min_replicas`; 0: none).
    pub(crate) replicas: usize,
    /// The hold cap (`max_hold`): the last renewal reaches exactly this far.
    pub(crate) hold_until: Option<Instant>,
    pub(crate) lease: Arc<Lease>,
    /// Which lock of a set held together this is (see `Lease::extend_part`; 0 for one lock).
    pub(crate) part: usize,
    /// A lock a release handed over (see `lock::wait_loop`): what was left of the window it was
    /// granted for. Its first renewal is due a third of the way through that, not the ttl.
    pub(crate) granted: Option<Duration>,
    /// The cap is the lease's own ttl (a handed-over lock without `renew`, extended to its ttl
    /// and no further), not `max_hold`: reaching it is not news.
    pub(crate) cap_is_ttl: bool,
}

/// Handle to a client's renewal task; dropping it stops the task.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    task: Mutex<AbortHandle>,
    deployment: Deployment,
    checks: Arc<ServerCheck>,
    handle: Handle,
    batching: Batching,
}

/// How leases are put into renewal calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    /// Most leases in one call.
    pub(crate) size: usize,
    /// One call per hash slot (a cluster: one script call cannot span slots).
    pub(crate) per_slot: bool,
    /// The `WAIT` timeout of leases that ask for replica acknowledgement.
    pub(crate) replica_timeout: Duration,
    /// The response timeout of one call.
    pub(crate) timeout: Duration,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task().abort();
    }
}

impl Watchdog {
    /// Starts the renewal task on `handle` (the client's own runtime).
    pub(crate) fn start(
        deployment: Deployment,
        checks: Arc<ServerCheck>,
        handle: Handle,
        batching: Batching,
    ) -> Self {
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::default()),
            wake: Notify::new(),
        });
        let task = spawn(&handle, &shared, (&deployment, &checks), batching);
        Watchdog {
            shared,
            task: Mutex::new(task),
            deployment,
            checks,
            handle,
            batching,
        }
    }

    fn task(&self) -> std::sync::MutexGuard<'_, AbortHandle> {
        sync::lock(&self.task)
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
                (&self.deployment, &self.checks),
                self.batching,
            );
        }
    }

    /// Starts renewing a lease; returns the id to [`Watchdog::unregister`] it with.
    pub(crate) fn register(&self, renewal: Renewal) -> u64 {
        self.ensure_running();
        let now = Instant::now();
        let period = renewal_interval(renewal.granted.unwrap_or(renewal.item.ttl));
        let due = now + period;
        let renews = renewal.renew;
        let (id, wake) = {
            let mut table = self.table();
            let wake = renews && table.planned.is_none_or(|at| due < at);
            table.next_id += 1;
            let id = table.next_id;
            let confirmed = renewal.switches;
            let window = renewal.granted.is_some();
            let renewal = Arc::new(renewal);
            let entry = Entry {
                renewal,
                due,
                confirmed,
                retry_at: now,
                period,
                window,
            };
            table.entries.insert(id, entry);
            (id, wake)
        };
        // A stored permit: the task re-plans even if it is between two waits. A lease that is
        // only confirmed after a switch or a step is never due, and one due after the task's
        // next look is seen then: the task need not re-plan (a lock held for a moment costs no
        // wake-up of the task).
        if wake {
            self.shared.wake.notify_one();
        }
        id
    }

    /// Stops renewing a lease at once (the next batch will not contain it).
    pub(crate) fn unregister(&self, id: u64) {
        self.table().entries.remove(&id);
    }

    /// Number of leases being renewed.
    pub(crate) fn len(&self) -> usize {
        // Not the leases only confirmed after a switch or a step.
        let table = self.table();
        table.entries.values().filter(|e| e.renewal.renew).count()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        sync::lock(&self.shared.table)
    }

    /// True when every lease still held was confirmed on the server under `epoch` (the
    /// testing kit waits for it after a failover it made).
    #[cfg(feature = "testing")]
    pub(crate) fn all_confirmed(&self, epoch: u64) -> bool {
        let table = self.table();
        let mut leases = table.entries.values();
        leases.all(|e| e.confirmed == epoch || e.renewal.lease.lost_reason().is_some())
    }
}

fn spawn(
    handle: &Handle,
    shared: &Arc<Shared>,
    (deployment, checks): (&Deployment, &Arc<ServerCheck>),
    batching: Batching,
) -> AbortHandle {
    let task = run(
        shared.clone(),
        (deployment.clone(), checks.clone()),
        batching,
    );
    handle.spawn(task).abort_handle()
}

/// The leases due in one round: what to send, and whose they are (same order).
#[derive(Default)]
struct Due {
    items: Vec<RenewItem>,
    holders: Vec<(u64, Arc<Renewal>)>,
}

/// Takes the leases due now (or at least half-way there), and those to confirm after a master
/// switch (`switches`: the count now); returns them and the next wake time.
fn collect(shared: &Shared, now: Instant, switches: u64) -> (Due, Option<Instant>) {
    let mut table = sync::lock(&shared.table);
    let mut due = Due::default();
    let mut next: Option<Instant> = None;
    let mut wake_at = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
    table.entries.retain(|&id, e| {
        let r = &e.renewal;
        if let Some(reason) = r.lease.lost_reason() {
            tracing::debug!(key = %r.name, %reason, "lease lost; renewal stopped");
            return false;
        }
        let confirm = e.confirmed != switches;
        if confirm && e.retry_at > now {
            wake_at(e.retry_at);
        }
        let confirm = confirm && e.retry_at <= now;
        if !r.renew {
            if confirm {
                // An owner check: a `RENEW` this short never extends a lease.
                let mut item = r.item.clone();
                item.ttl = Duration::from_millis(1);
                due.items.push(item);
                due.holders.push((id, r.clone()));
            }
            return true;
        }
        let interval = e.period;
        if e.due > now + interval / 2 && !confirm {
            wake_at(e.due);
            return true;
        }
        let mut item = r.item.clone();
        let mut last = false;
        if let Some(cap) = r.hold_until {
            let left = cap.saturating_duration_since(now);
            if left <= item.ttl {
                // The final renewal, up to the cap; then the lease elapses.
                if r.cap_is_ttl {
                    tracing::debug!(key = %r.name, "handed-over lock extended to its ttl");
                } else {
                    tracing::info!(key = %r.name, "hold time cap reached; last renewal");
                }
                r.lease.stop_renewing();
                (item.ttl, last) = (left, true);
            }
        }
        if item.ttl >= Duration::from_millis(1) {
            due.items.push(item);
            due.holders.push((id, r.clone()));
        }
        if last {
            return false;
        }
        e.period = renewal_interval(r.item.ttl);
        e.due = now + e.period;
        wake_at(e.due);
        true
    });
    // With leases due the task sends them and looks again at once.
    table.planned = match due.items.is_empty() {
        true => Some(next.unwrap_or_else(|| now + lease::FOREVER)),
        false => Some(now),
    };
    (due, next)
}

/// The due leases in groups that can share one call: same hash slot (when batching per slot)
/// and same replica count (so a lease that asks for no acknowledgement never waits for one).
fn groups(due: Due, batching: Batching) -> Vec<Due> {
    let mut groups: HashMap<(u16, usize), Due> = HashMap::new();
    for (item, holder) in due.items.into_iter().zip(due.holders) {
        let slot = if batching.per_slot {
            hash_slot(item.key.as_bytes())
        } else {
            0
        };
        let group = groups.entry((slot, holder.1.wait_replicas())).or_default();
        group.items.push(item);
        group.holders.push(holder);
    }
    groups.into_values().collect()
}

impl Renewal {
    /// Replicas that must acknowledge this lease's requests: an owner check asks for none.
    fn wait_replicas(&self) -> usize {
        if self.renew {
            self.replicas
        } else {
            0
        }
    }
}

/// Resolves at the next master switch, clock step or restart (never, where there are none).
async fn next_switch(switches: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = switches.as_mut() {
        if rx.changed().await.is_ok() {
            return;
        }
    }
    // No switches here, or nobody left to announce them.
    *switches = None;
    std::future::pending().await
}

/// The epoch leases are confirmed against: master switches, server clock steps and restarts
/// seen (see the module docs). A lease confirmed under an older epoch is confirmed again.
pub(crate) fn epoch(deployment: &Deployment, checks: &ServerCheck) -> u64 {
    deployment.switches() + checks.steps()
}

async fn run(
    shared: Arc<Shared>,
    (deployment, checks): (Deployment, Arc<ServerCheck>),
    batching: Batching,
) {
    let mut batches = 0u64;
    let mut switched = deployment.watch_switches();
    let mut stepped = checks.is_on().then(|| checks.subscribe());
    loop {
        let switches = epoch(&deployment, &checks);
        let (due, next) = collect(&shared, Instant::now(), switches);
        if due.items.is_empty() {
            let at = next.unwrap_or_else(|| Instant::now() + lease::FOREVER);
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = shared.wake.notified() => {}
                () = next_switch(&mut switched) => {}
                () = next_switch(&mut stepped) => {}
            }
            continue;
        }
        for group in groups(due, batching) {
            let replicas = group.holders.first().map_or(0, |(_, r)| r.wait_replicas());
            let wait = (replicas > 0).then(|| ReplicaWait {
                replicas: deployment.replicas_to_wait_for(replicas),
                timeout: batching.replica_timeout,
            });
            let size = batching.size;
            for (items, holders) in group.items.chunks(size).zip(group.holders.chunks(size)) {
                batches += 1;
                let id = ShortId::with_counter("", b'b', batches);
                metrics::renewal_batch(items.len());
                let call = RenewCall {
                    id: id.as_bytes(),
                    items,
                    wait,
                };
                renew_chunk(
                    &shared,
                    (&deployment, &checks),
                    &call,
                    holders,
                    batching.timeout,
                    switches,
                )
                .await;
            }
        }
    }
}

/// Sends one renewal call (`switches`: the master switch count when it was collected) and
/// applies its reply to each lease.
async fn renew_chunk(
    shared: &Shared,
    (deployment, checks): (&Deployment, &ServerCheck),
    call: &RenewCall<'_>,
    holders: &[(u64, Arc<Renewal>)],
    timeout: Duration,
    switches: u64,
) {
    let sent_at = Instant::now();
    let reply = noting_silence(deployment.call(call, timeout), holders, sent_at).await;
    let mut table = sync::lock(&shared.table);
    // A reply that crossed a master switch may come from the superseded master: it extends
    // and decides nothing (see the module docs); the leases are confirmed on the new master.
    let reply = match reply {
        Ok(_) if epoch(deployment, checks) != switches => Err(None),
        Ok(reply) => Ok(reply),
        Err(failed) => Err(Some(failed)),
    };
    match reply {
        Ok((statuses, acked)) => {
            let acked = acked.unwrap_or(0);
            // What this call's `WAIT` asked for (`ALL_REPLICAS` resolved as it was sent).
            let required = call.wait.map_or(0, |w| w.replicas);
            let batch = call.items.iter().zip(holders).zip(statuses);
            for ((item, (id, r)), status) in batch {
                r.lease.set_refused(false);
                r.lease.renewal_answered();
                if matches!(status, Renewed::Yes) {
                    if let Some(e) = table.entries.get_mut(id) {
                        e.confirmed = switches;
                    }
                    if !r.renew {
                        continue;
                    }
                }
                let lost = match status {
                    // Extended on the master only: a failed renewal, retried soon; if that
                    // lasts until the lease runs out, the loss says so.
                    Renewed::Yes if r.renew && acked < required => {
                        metrics::renewal(RenewalOutcome::Failed);
                        r.lease.set_unreplicated(true);
                        tracing::warn!(key = %r.name, acked, required, "lease renewal not acknowledged by enough replicas; retrying");
                        if let Some(e) = table.entries.get_mut(id) {
                            e.due = e.due.min(Instant::now() + RETRY_AFTER_ERROR);
                        }
                        continue;
                    }
                    Renewed::Yes => {
                        metrics::renewal(RenewalOutcome::Ok);
                        let on_window = table
                            .entries
                            .get_mut(id)
                            .is_some_and(|e| std::mem::take(&mut e.window));
                        if !on_window {
                            r.lease.held().renewed(r.item.ttl, || r.lease.deadline());
                        }
                        r.lease.set_unreplicated(false);
                        r.lease
                            .extend_part(r.part, guaranteed_until(sent_at, item.ttl));
                        continue;
                    }
                    // RedLock: this lock's majority could not be heard (the rest of its batch
                    // was decided): a failed renewal of this lock alone, retried soon; if that
                    // lasts until its lease runs out, the loss says so.
                    Renewed::Undecided => {
                        metrics::renewal(RenewalOutcome::Failed);
                        r.lease.renewal_unanswered();
                        tracing::warn!(key = %r.name, "lease renewal undecided: too few RedLock masters answered for this lock; retrying");
                        if let Some(e) = table.entries.get_mut(id) {
                            e.due = e.due.min(Instant::now() + RETRY_AFTER_ERROR);
                        }
                        continue;
                    }
                    Renewed::Gone => LossReason::Expired,
                    Renewed::OtherOwner | Renewed::NotALock => LossReason::Stolen,
                };
                metrics::renewal(RenewalOutcome::Lost);
                // Released while the batch was in flight: not a loss.
                if table.entries.remove(id).is_some() && r.lease.mark_lost(lost) {
                    tracing::warn!(key = %r.name, reason = %lost, "lock lost: renewal found it no longer ours");
                }
            }
        }
        Err(failed) => {
            // An error reply means Redis is there but will not renew (READONLY, NOPERM, OOM,
            // ...): if that lasts until the lease runs out, the loss says so.
            let refused = matches!(&failed, Some(CallError::Redis(e)) if is_error_reply(e));
            // No answer at all (a timeout, a broken connection, too few RedLock masters): the
            // evidence that makes a loss `Unreachable`. A reply that crossed a master switch
            // was an answer, from the old master: it tells nothing about reaching the new one.
            let unanswered = failed.is_some() && !refused;
            let why = match failed {
                None => "the master switched while the renewal was in flight".to_owned(),
                Some(CallError::Redis(e)) => e.to_string(),
                Some(CallError::Timeout) => format!("no reply within {timeout:?}"),
                Some(CallError::NoQuorum { agreed, required }) => {
                    format!("only {agreed} of the {required} RedLock masters it needs renewed it")
                }
            };
            let retry = Instant::now() + RETRY_AFTER_ERROR;
            for (id, r) in holders {
                metrics::renewal(RenewalOutcome::Failed);
                r.lease.set_refused(refused);
                if unanswered {
                    r.lease.renewal_unanswered();
                } else if refused {
                    r.lease.renewal_answered();
                }
                tracing::warn!(key = %r.name, error = %why, "lease renewal failed; retrying");
                if let Some(e) = table.entries.get_mut(id) {
                    e.due = e.due.min(retry);
                    e.retry_at = retry;
                }
            }
        }
    }
}

/// Awaits a renewal call's `reply`; if it has not come by half of what the shortest lease of
/// `holders` had left when it was sent (`sent_at`), notes the silence on each lease
/// ([`Lease::renewal_unanswered`]) and keeps waiting. So a call that outlives the lease (a
/// response timeout longer than what it had left) still leaves the evidence that tells a frozen
/// or cut-off Redis (`Unreachable`) from a process that did not run (`LeaseElapsed`): stalled
/// past the deadline, the process finds this timer late and the lease past, which is no
/// evidence.
async fn noting_silence<T>(
    reply: impl std::future::Future<Output = T>,
    holders: &[(u64, Arc<Renewal>)],
    sent_at: Instant,
) -> T {
    let earliest = holders.iter().map(|(_, r)| r.lease.deadline()).min();
    let left = earliest.map_or(Duration::ZERO, |at| at.saturating_duration_since(sent_at));
    tokio::pin!(reply);
    tokio::select! {
        biased;
        out = &mut reply => return out,
        () = tokio::time::sleep_until(sent_at + left / 2) => {
            for (_, r) in holders {
                r.lease.renewal_unanswered();
            }
        }
    }
    reply.await
}
