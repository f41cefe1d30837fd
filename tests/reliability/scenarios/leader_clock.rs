//! Row 24c: leader election through server clock steps (issue 40). One server on a clock the
//! suite steps (`testkit::ShiftedClock`: an `LD_PRELOAD` offset on `redis-server`'s wall clock),
//! three candidate processes (`election_log`, ttl 1 s), an observer in the suite and in every
//! candidate. While a leader leads, the server's clock steps forward 60 s (every key with an
//! expiry, the election's lock among them, is gone at once); then back 60 s (to the true time)
//! and back 60 s more, the leader resigning after each step back, so the next term is minted
//! on a clock behind the last one's.
//!
//! Invariants (row 24's, `election_log::check`): terms strictly rise in election order (a step
//! back must not mint a lower term: the fence floor and the record lift it); the observers
//! see every term in order; no two terms' `Ok` checks overlap, except across the step forward,
//! which no client can prevent (`Config::server_check`): there the old leader is told within
//! [`TOLD_WITHIN`] of the new one's first `Ok`; after the step forward a new leader leads
//! within ttl + 0.5 s, after a resign within row 24's resign bound. The step forward lands at a
//! random point of the clients' server-check period (the row's seed replays it).

use std::sync::Arc;
use std::time::Duration;

use testkit::ShiftedClock;

use super::election_log::{
    self, now_us, span, Campaign, Election, REPLICA_TIMEOUT, RESPONSE_TIMEOUT,
};
use crate::common::{ms, Rng, Settings};
use crate::report::{Scenario, Tally};

const TTL: Duration = Duration::from_secs(1);
const CANDIDATES: usize = 3;
const STEP: Duration = Duration::from_secs(60);
/// The default `Config::server_check`: each client checks its server this often.
const SERVER_CHECK: Duration = Duration::from_millis(250);
/// Across a step forward, the longest two terms' `Ok` checks may overlap: the old leader's
/// client notices the step at its next server check and confirms its lease at once (a round
/// trip, within the response timeout).
const TOLD_WITHIN: Duration = SERVER_CHECK.saturating_add(RESPONSE_TIMEOUT);
/// A new leader leads within this long of the step forward (the waiters try again at the
/// lease they last saw, ttl at most); row 24's bound for a killed leader.
const REPLACED_WITHIN: Duration = TTL.saturating_add(Duration::from_millis(500));
/// A resigning leader is replaced within this long (row 24's bound: 18–25 ms over RedLock on a
/// quiet machine; a step back changes nothing in a handoff).
const RESIGN_BOUND: Duration = Duration::from_millis(50);
/// [`RESIGN_BOUND`] in CI (`CI` set), next to compiles (row 24 saw 49 and 58 ms there).
const RESIGN_BOUND_CI: Duration = Duration::from_millis(100);

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let rounds = s.pick(2, 8);
    let seed = s.seed;
    Scenario::new(
        "24c",
        format!(
            "leader election through server clock steps: one server, {CANDIDATES} candidate processes, ttl 1 s; the server's clock +60 s under a leader, then -60 s and -60 s more, the leader resigning after each ({rounds}x); an observer in the suite and one in every candidate"
        ),
        budget,
        move |t| run(t, rounds, seed),
    )
}

async fn run(t: Arc<Tally>, rounds: u64, seed: u64) {
    let mut rng = Rng::new(seed);
    let (server, clock) = tokio::task::spawn_blocking(ShiftedClock::server)
        .await
        .expect("start a server on a stepped clock");
    let observer_client = election_log::connect("url", &server.url())
        .await
        .expect("the observer's client");
    let mut notes = Vec::new();
    for round in 0..rounds {
        let campaign = Campaign {
            kind: "url",
            urls: server.url(),
            name: format!("clock-{round}"),
            ttl: TTL,
            replicas: 0,
            replica_timeout: REPLICA_TIMEOUT,
        };
        let election = Election::start("one server", &observer_client, &campaign, CANDIDATES);
        // The step lands anywhere in the clients' server-check period.
        let phase = rng.millis(0, ms(SERVER_CHECK) as u64);
        notes.push(steps(&t, election, &clock, phase).await);
        // Back on the true time for the next round (the clock is at -60 s; nobody campaigns).
        clock.step_forward(STEP);
    }
    t.note(format!("seed {seed}; {}", notes.join("; ")));
    drop((server, clock));
}

/// One round: +60 s, -60 s and a resign, -60 s and a resign; its note.
async fn steps(t: &Tally, mut election: Election, clock: &ShiftedClock, phase: Duration) -> String {
    let Some((first, _)) = election.lead_after(t, 0, TTL * 10).await else {
        return "no leader".to_owned();
    };
    lead_a_little(&mut election).await;
    let until = now_us() + phase.as_micros() as u64;
    election.until(TTL, |_| now_us() >= until).await;
    let stepped_at = now_us();
    clock.step_forward(STEP);
    t.faults(1);
    let next = election.lead_after(t, stepped_at, TTL * 10).await;
    let replaced = election
        .log()
        .lead_after(stepped_at)
        .map(|l| span(stepped_at, l.1));
    let told = election
        .log()
        .lost_of(first)
        .map(|(at, why)| (span(stepped_at, at), why.to_owned()));
    let mut resigns = Vec::new();
    let mut leader = next;
    for _ in 0..2 {
        let Some((term, index)) = leader else { break };
        lead_a_little(&mut election).await;
        clock.step_back(STEP);
        t.faults(1);
        lead_a_little(&mut election).await;
        let resigned_at = now_us();
        election.resign(index).await;
        leader = election.lead_after(t, resigned_at, TTL * 10).await;
        if let Some((next, _)) = leader {
            let at = election.log().lead_after(resigned_at).map_or(0, |l| l.1);
            resigns.push((term, next, span(resigned_at, at)));
        }
    }
    lead_a_little(&mut election).await;
    let ended = election.finish(t, TTL + TTL / 2).await;
    let log = &ended.log;
    // The overlap allowed is the step forward's: every other pair of terms must not overlap.
    let bounds = (TOLD_WITHIN, REPLACED_WITHIN);
    let checked = election_log::check(t, "one server", &ended, bounds);
    election_log::check_record(t, "one server", &ended, None);
    let across_step = log
        .overlaps()
        .into_iter()
        .filter(|&(earlier, _, _)| earlier != first)
        .collect::<Vec<_>>();
    t.check(across_step.is_empty(), || {
        format!("two leaders said Ok at once across a step back or a resign: {across_step:?}")
    });
    t.check(replaced.is_some_and(|d| d <= REPLACED_WITHIN), || {
        format!("after the step forward a new leader came after {replaced:?} (bound {REPLACED_WITHIN:?})")
    });
    t.check(told.is_some(), || {
        "the leader whose lock the step forward expired was never told".to_owned()
    });
    // Both believed: the old leader's `LOST` after the next one's `LEAD`.
    let both_believed = match (log.lost_of(first), log.lead_after(stepped_at)) {
        (Some((told, _)), Some((_, elected))) => span(elected, told),
        _ => Duration::ZERO,
    };
    t.check(both_believed <= TOLD_WITHIN, || {
        format!(
            "after the step forward the old leader was told {} ms after the next one was elected (allowed: {} ms)",
            ms(both_believed),
            ms(TOLD_WITHIN)
        )
    });
    let resign_bound = match std::env::var_os("CI") {
        Some(_) => RESIGN_BOUND_CI,
        None => RESIGN_BOUND,
    };
    for &(term, next, after) in &resigns {
        t.check(after <= resign_bound, || {
            format!("term {term} resigned after a step back, term {next} elected {after:?} later (bound {resign_bound:?})")
        });
    }
    format!(
        "+60 s: {}, next term after {} ms, overlap {} ms, both believed {} ms; -60 s twice, resigning: terms {}; {} terms, {} Ok checks, observers {} items, suite observer at most {} ms behind",
        told.map_or("never told".to_owned(), |(d, why)| format!("told after {} ms ({why})", ms(d))),
        replaced.map_or(0, ms),
        ms(checked.worst_overlap),
        ms(both_believed),
        resigns
            .iter()
            .map(|(term, next, after)| format!("{term} -> {next} in {} ms", ms(*after)))
            .collect::<Vec<_>>()
            .join(", "),
        checked.terms,
        checked.oks,
        checked.observed,
        ms(checked.observer_lag),
    )
}

/// Lets the leader lead for 300 ms (its checks are the evidence), reading what it says.
async fn lead_a_little(election: &mut Election) {
    let until = now_us() + 300_000;
    election.until(TTL, |_| now_us() >= until).await;
}
