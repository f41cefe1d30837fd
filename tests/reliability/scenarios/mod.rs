//! The scenarios, in report order, and the worker roles they start.

mod bad_input;
mod cancel_storm;
mod clock_steps;
mod cluster_failover;
mod connection_faults;
mod election_log;
mod failover_belief;
mod fairness;
mod holder_faults;
mod killed_waiters;
mod leader_clock;
mod leader_failover;
mod leader_faults;
mod long_hold;
mod multi_stall;
mod mutex;
mod partition;
mod proxy_faults;
mod redis_faults;
mod redlock_fairness;
mod redlock_loss;
mod registry_misuse;
mod sentinel_failover;
mod stall;
mod zombie_writes;

use std::time::Duration;

use crate::common::Settings;
use crate::report::Scenario;
use crate::worker::Ctx;

/// Every scenario with its budget (the longest it may run before it counts as hung).
pub(crate) fn all(settings: &Settings) -> Vec<Scenario> {
    let s = settings.clone();
    let secs = Duration::from_secs;
    let heavy = |ci: u64, heavy: u64| secs(settings.pick(ci, heavy));
    vec![
        mutex::scenario(&s, mutex::Mode::Wait, "1a", heavy(60, 300)),
        mutex::scenario(&s, mutex::Mode::RetryOnBusy, "1b", heavy(60, 300)),
        mutex::scenario(&s, mutex::Mode::Unlocked, "1c", heavy(60, 120)),
        holder_faults::killed(&s, heavy(40, 120)),
        holder_faults::paused(&s, heavy(40, 120)),
        killed_waiters::each_kind(&s, heavy(90, 120)),
        killed_waiters::fleet(&s, heavy(60, 120)),
        redis_faults::paused(&s, heavy(40, 120)),
        redis_faults::restarted(&s, heavy(40, 120)),
        connection_faults::scenario(&s, heavy(40, 120)),
        proxy_faults::latency_and_resets(&s, heavy(40, 120)),
        proxy_faults::dropped_reply(&s, heavy(40, 120)),
        cancel_storm::scenario(&s, heavy(60, 300)),
        long_hold::scenario(&s, heavy(40, 60)),
        bad_input::scenario(&s, heavy(40, 60)),
        registry_misuse::scenario(&s, heavy(40, 60)),
        stall::scenario(&s, heavy(60, 240)),
        stall::permits_scenario(&s, heavy(60, 240)),
        stall::read_write_scenario(&s, heavy(60, 240)),
        multi_stall::scenario(&s, heavy(60, 240)),
        sentinel_failover::scenario(&s, heavy(90, 120)),
        cluster_failover::scenario(&s, heavy(40, 120)),
        redlock_loss::scenario(&s, heavy(40, 120)),
        redlock_fairness::scenario(&s, heavy(40, 120)),
        fairness::scenario(&s, heavy(90, 200)),
        partition::scenario(&s, heavy(40, 120)),
        failover_belief::sentinel(&s, heavy(90, 240)),
        failover_belief::cluster(&s, heavy(90, 200)),
        clock_steps::scenario(&s, heavy(90, 120)),
        zombie_writes::scenario(&s, heavy(90, 240)),
        leader_faults::scenario(&s, heavy(120, 300)),
        leader_failover::scenario(&s, heavy(60, 180)),
        leader_clock::scenario(&s, heavy(30, 90)),
    ]
}

/// Runs the worker role `role` (in a worker process).
pub(crate) async fn worker_role(role: &str, ctx: Ctx) -> Result<(), String> {
    match role {
        "mutex" => mutex::worker(ctx).await,
        "holder" => holder_faults::holder_worker(ctx).await,
        "paused-holder" => holder_faults::paused_worker(ctx).await,
        "waiters" => killed_waiters::waiters_worker(ctx).await,
        "payer" => killed_waiters::payer_worker(ctx).await,
        "storm" => cancel_storm::worker(ctx).await,
        "registry" => registry_misuse::worker(ctx).await,
        "stall" => stall::worker(ctx).await,
        "multi-stall" => multi_stall::worker(ctx).await,
        "zombie" => zombie_writes::worker(ctx).await,
        "candidate" => leader_faults::worker(ctx).await,
        "elector" => election_log::worker(ctx).await,
        other => Err(format!("unknown worker role `{other}`")),
    }
}
