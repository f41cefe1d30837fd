//! Scenario 20: RedLock (`Config::redlock`) waiting is fair across clients (issue 19, item 3).
//!
//! Clients (one task each, as separate processes would be) take one lock over five masters
//! again and again: each hold lasts 20–200 ms, and each acquire waits up to 3 s. The run has two
//! phases: every master up, then two of the five killed (`SIGKILL`; a bare majority is left).
//!
//! Invariants, per phase: no two holders overlap, no acquire ends `Busy` (a whole wait without
//! a turn) or fails otherwise, and Jain's index over the clients' `Ok` counts is at least 0.9.
//! The note gives each phase's `Ok` per client, the longest streak of one client, Jain's index
//! and the handoff latency (a release call to the next holder of another client: p50 / p90).

use std::time::Duration;

use distlock::{Client, Config};
use testkit::{fairness_run, FairnessRun, RedisServer};

use crate::common::Settings;
use crate::report::{Scenario, Tally};
use crate::scenarios::fairness::check;

const MASTERS: usize = 5;
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let clients = s.pick(4, 6);
    let phase = Duration::from_secs(s.pick(12, 40));
    Scenario::new(
        "20",
        format!(
            "RedLock fairness over {MASTERS} masters: {clients} clients, holds 20-200 ms, wait 3 s; {phase:?} all up, {phase:?} with 2 killed"
        ),
        budget,
        move |t| run(t, clients, phase),
    )
}

async fn client(urls: &[String]) -> Client {
    Config::redlock(urls.iter().cloned())
        .response_timeout(RESPONSE_TIMEOUT)
        .connect_timeout(RESPONSE_TIMEOUT)
        .connect()
        .await
        .expect("a RedLock client")
}

async fn run(t: std::sync::Arc<Tally>, clients: usize, phase: Duration) {
    let masters = tokio::task::spawn_blocking(|| {
        (0..MASTERS)
            .map(|_| RedisServer::start())
            .collect::<Vec<_>>()
    })
    .await
    .expect("start the masters");
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let mut all = Vec::new();
    for _ in 0..clients {
        all.push(client(&urls).await);
    }
    let run = FairnessRun {
        duration: phase,
        ..FairnessRun::default()
    };
    let up = fairness_run(&all, "fair", run).await;
    check(&t, "all up", Some(0), &up);
    let masters = tokio::task::spawn_blocking(move || {
        let mut masters = masters;
        for master in &mut masters[..2] {
            master.kill();
        }
        masters
    })
    .await
    .expect("kill two masters");
    t.faults(2);
    let two_down = fairness_run(&all, "fair", run).await;
    check(&t, "2 of 5 killed", Some(0), &two_down);
    drop(masters);
}
