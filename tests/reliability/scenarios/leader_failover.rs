//! Row 24f: leader election through Sentinel failovers (issue 40). A master, two replicas and
//! three sentinels (`down-after-milliseconds` 1 s); two elections at once, each with its own
//! candidate processes (`election_log`, ttl 1 s): one with `min_replicas` 0, one with every
//! replica (`ALL_REPLICAS`). Once both have a leader, the master is failed over: `SENTINEL
//! FAILOVER`, or `SIGKILL` (each on a fresh group). The suite observes each election, and so
//! does every candidate; it hears the sentinels' own events (`+promoted-slave`,
//! `+switch-master`) on their pub/sub, to time the failover. A third case fails the master
//! over right after an election with every replica, its record still on its way to the
//! replicas ([`just_elected`]).
//!
//! Invariants (row 24's, `election_log::check`), per election and fault: terms strictly rise
//! in election order; the observers see every term in order, each within ttl + 0.5 s of its
//! election; with every replica, no two terms' `Ok` checks overlap; the election has a leader
//! on the new master soon after a sentinel names it ([`REELECTED_WITHIN`], with every replica
//! [`REELECTED_WITHIN_ALL`]); the record names the
//! leader of the moment at the end (`election_log::check_record`). With `min_replicas` 0 two
//! terms may believe at once for at most [`OVERLAP_BOUND_R0`] (their `Ok` checks, and the old
//! leader's `LOST` after the next one's `LEAD`).
//!
//! Found and fixed: B8 (a campaign gave up with `Unreplicated` after a switch; now a violation
//! if it does), B9 (the third case: the record of a new term was not replicated before it was
//! proclaimed).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::ALL_REPLICAS;
use futures_util::StreamExt;
use testkit::{RedisSentinel, SentinelOptions};
use tokio::task::JoinHandle;

use super::election_log::{
    self, now_us, span, Campaign, Election, Log, REPLICA_TIMEOUT, RESPONSE_TIMEOUT,
};
use crate::common::{lock_unpoisoned, ms, Settings};
use crate::report::{Scenario, Tally};

const TTL: Duration = Duration::from_secs(1);
const CANDIDATES: usize = 3;
const DOWN_AFTER: Duration = Duration::from_secs(1);
/// How often a client asks the sentinel it listens to which master it names, besides its
/// `+switch-master` announcements (the runtime's `CHECK_EVERY`).
const SENTINEL_CHECK: Duration = Duration::from_millis(500);
/// From a sentinel first naming the new master (`+promoted-slave`) to a new term's first `Ok`
/// check, with `min_replicas` 0: before the naming nobody can be elected there (the
/// sentinels' failure detection, `down-after-milliseconds` and their own election, comes
/// first: 2.2 s after a `SIGKILL` here); after it, the old term's copy of the lock there runs
/// out within a ttl (every renewal it holds came before the naming), and the candidates'
/// clients hear of the switch within [`SENTINEL_CHECK`] and campaign there. Row 24's bound for
/// a killed leader, ttl + 0.5 s, counted from the naming.
const REELECTED_WITHIN: Duration = TTL.saturating_add(SENTINEL_CHECK);
/// [`REELECTED_WITHIN`] with every replica: one more [`SENTINEL_CHECK`], as a client asks the
/// sentinels which replicas the new master has every 500 ms (until they list one, its
/// acquires are refused as unreplicated).
const REELECTED_WITHIN_ALL: Duration = REELECTED_WITHIN.saturating_add(SENTINEL_CHECK);
/// Added to [`REELECTED_WITHIN_ALL`] in CI (`CI` set), where the suite shares its two cores with
/// other test binaries: the replicas' resync with the new master, which every `WAIT` of the
/// next election needs, took the next term's first `Ok` to 2.46 s after the naming there
/// (0.5–1.5 s on a quiet machine).
const REELECTED_SLACK_CI: Duration = Duration::from_millis(1500);
/// With `min_replicas` 0, how long two terms may believe at once (their `Ok` checks, and the
/// old leader's `LOST` after the next one's `LEAD`): the old leader renews on the old master,
/// unreplicated, until its client hears of the switch, within [`SENTINEL_CHECK`] of the
/// sentinel it listens to naming the new master (every client here listens to the first
/// sentinel, as clients with the same list do), and then confirms its lease on the new
/// master (one round trip, within the response timeout).
const OVERLAP_BOUND_R0: Duration = SENTINEL_CHECK.saturating_add(RESPONSE_TIMEOUT);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Manual,
    Kill,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Manual => "SENTINEL FAILOVER",
            Fault::Kill => "master SIGKILL",
        }
    }
}

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let rounds = s.pick(1, 3);
    Scenario::new(
        "24f",
        format!(
            "leader election through Sentinel failovers (master + 2 replicas, down-after 1 s): two elections at once, min_replicas 0 and all, {CANDIDATES} candidate processes each, ttl 1 s; SENTINEL FAILOVER and master SIGKILL, and with all replicas (ttl 6 s) SENTINEL FAILOVER right after an election, replication held ({rounds}x each, a fresh group each); an observer in the suite and one in every candidate"
        ),
        budget,
        move |t| run(t, rounds),
    )
}

/// What one election went through in one failover (instants in µs after the fault).
struct Outcome {
    label: String,
    fault: Fault,
    /// A sentinel first named the new master (`+promoted-slave`).
    named: Duration,
    /// A sentinel first announced the switch (`+switch-master`), after the naming.
    switched: Option<Duration>,
    /// The leader's term was never said lost: it led on through the failover.
    kept: bool,
    /// The old leader told (`LOST`): when, and why.
    told: Option<(Duration, String)>,
    /// The first `Ok` check of a later term, in ms from the naming (negative: before it).
    reelected: Option<i64>,
    /// No term's `Ok` checks: from the old term's last to the next term's first.
    vacant: Option<Duration>,
    /// The longest overlap of two terms' `Ok` checks.
    overlap: Duration,
    /// The longest from an election to the suite's observer yielding its term.
    observer_lag: Duration,
    /// The old leader told this long after the next term was elected (its `LOST` after the
    /// next `LEAD`): both believed they led.
    both_believed: Duration,
    refused: usize,
}

async fn run(t: Arc<Tally>, rounds: u64) {
    let mut outcomes = Vec::new();
    let mut records = Vec::new();
    for round in 0..rounds {
        for fault in [Fault::Manual, Fault::Kill] {
            outcomes.extend(failover(&t, fault, round).await);
            t.faults(1);
        }
        records.push(just_elected(&t, round).await);
        t.faults(1);
    }
    let mut notes: Vec<String> = outcomes.iter().map(Outcome::note).collect();
    notes.extend(records);
    t.note(notes.join("; "));
}

impl Outcome {
    fn note(&self) -> String {
        let told = match &self.told {
            Some((at, why)) => format!("told after {} ms ({why})", ms(*at)),
            None => "never told".to_owned(),
        };
        let next = match (self.reelected, self.vacant) {
            (Some(at), Some(vacant)) => {
                format!(
                    "next term Ok {at:+} ms from the naming, none for {} ms",
                    ms(vacant)
                )
            }
            _ => "no next term".to_owned(),
        };
        format!(
            "{} / {}: named after {} ms, switch announced {} ms later; {}, {told}; {next}; overlap {} ms, both believed {} ms; the suite's observer at most {} ms behind{}",
            self.label,
            self.fault.name(),
            ms(self.named),
            self.switched.map_or("never".to_owned(), |d| ms(d).to_string()),
            if self.kept { "kept" } else { "replaced" },
            ms(self.overlap),
            ms(self.both_believed),
            ms(self.observer_lag),
            match self.refused {
                0 => String::new(),
                n => format!("; {n} campaigns refused (B8)"),
            }
        )
    }
}

/// One failover of a fresh group under both elections.
async fn failover(t: &Tally, fault: Fault, round: u64) -> Vec<Outcome> {
    let group = Arc::new(
        tokio::task::spawn_blocking(|| {
            RedisSentinel::start_with(SentinelOptions {
                replicas: 2,
                down_after: DOWN_AFTER,
            })
        })
        .await
        .expect("start the Sentinel group"),
    );
    let urls = group.sentinel_urls();
    let events = SentinelEvents::listen(&urls).await;
    let urls = urls.join(",");
    let observer_client = election_log::connect("sentinel", &urls)
        .await
        .expect("the observer's client");
    let cases = [(0, "min_replicas 0"), (ALL_REPLICAS, "min_replicas all")];
    let mut elections: Vec<(Election, usize)> = cases
        .into_iter()
        .enumerate()
        .map(|(i, (replicas, label))| {
            let campaign = Campaign {
                kind: "sentinel",
                urls: urls.clone(),
                name: format!("failover-{round}-{i}"),
                ttl: TTL,
                replicas,
                replica_timeout: REPLICA_TIMEOUT,
            };
            let election = Election::start(label, &observer_client, &campaign, CANDIDATES);
            (election, replicas)
        })
        .collect();
    let mut leaders = Vec::new();
    for (election, _) in &mut elections {
        leaders.push(election.lead_after(t, 0, TTL * 10).await.map(|l| l.0));
    }
    // Let the leaders lead a little (their checks are the evidence).
    let settle = now_us() + 300_000;
    for (election, _) in &mut elections {
        election.until(TTL, |_| now_us() >= settle).await;
    }
    let fault_at = now_us();
    let faulty = group.clone();
    tokio::task::spawn_blocking(move || {
        let old = match fault {
            Fault::Manual => {
                let old = faulty.master_port();
                faulty.start_failover();
                old
            }
            Fault::Kill => faulty.signal_master("-KILL"),
        };
        faulty.wait_for_promotion(old)
    })
    .await
    .expect("the failover");
    let named_at = events.first("+promoted-slave").unwrap_or_else(now_us);
    let mut outcomes = Vec::new();
    for ((mut election, replicas), old) in elections.into_iter().zip(leaders) {
        let old = old.unwrap_or(0);
        let within = match (replicas, std::env::var_os("CI")) {
            (0, _) => REELECTED_WITHIN,
            (_, None) => REELECTED_WITHIN_ALL,
            (_, Some(_)) => REELECTED_WITHIN_ALL + REELECTED_SLACK_CI,
        };
        // Led on the new master: by a later term, or by the old one past any lease it could
        // have had from the old master (the bound on a later term is checked below).
        let led_on = election
            .until(within + TTL * 2, |log| {
                log.held.iter().any(|h| {
                    (h.0 != old && h.1 > fault_at) || h.1 > named_at + 2 * TTL.as_micros() as u64
                })
            })
            .await;
        // Evidence of what followed: a loss said late, the observers.
        let more = now_us() + 500_000;
        election.until(TTL, |_| now_us() >= more).await;
        let label = election.label.clone();
        let what = format!("{label} / {}", fault.name());
        let ended = election.finish(t, TTL + TTL / 2).await;
        let log = &ended.log;
        let allowed = match replicas {
            0 => OVERLAP_BOUND_R0,
            _ => Duration::ZERO,
        };
        let bounds = (allowed, TTL + Duration::from_millis(500));
        let checked = election_log::check(t, &what, &ended, bounds);
        election_log::check_record(t, &what, &ended, None);
        t.check(led_on, || format!("{what}: nobody led on the new master"));
        let instants = (fault_at, named_at, events.first("+switch-master"));
        let mut outcome = outcome(log, old, instants, &label, fault);
        outcome.observer_lag = checked.observer_lag;
        // Checked only when there is a next term (`led_on` says whether the election went on).
        if let Some(at) = outcome.reelected {
            t.check(at <= within.as_millis() as i64, || {
                format!(
                    "{what}: the next term's first Ok came {at} ms after the naming (bound {} ms)",
                    ms(within)
                )
            });
        }
        t.check(outcome.both_believed <= allowed, || {
            format!(
                "{what}: the old leader was told {} ms after the next one was elected (allowed: {} ms)",
                ms(outcome.both_believed),
                ms(allowed)
            )
        });
        outcomes.push(outcome);
    }
    events.stop();
    drop(observer_client);
    drop(group);
    outcomes
}

fn outcome(
    log: &Log,
    old: u64,
    (fault_at, named_at, switched_at): (u64, u64, Option<u64>),
    label: &str,
    fault: Fault,
) -> Outcome {
    let told = log
        .lost_of(old)
        .map(|(at, why)| (span(fault_at, at), why.to_owned()));
    let next = log
        .held
        .iter()
        .filter(|h| h.0 != old && h.1 > fault_at)
        .map(|h| h.1)
        .min();
    let reelected = next.map(|first| (first as i64 - named_at as i64) / 1000);
    let both_believed = match (log.lost_of(old), log.lead_after(fault_at)) {
        (Some((told, _)), Some((_, elected))) => span(elected, told),
        _ => Duration::ZERO,
    };
    let vacant = next.map(|first| span(log.last_ok(old).unwrap_or(fault_at), first));
    Outcome {
        label: label.to_owned(),
        fault,
        named: span(fault_at, named_at),
        switched: switched_at.map(|at| span(named_at, at)),
        kept: told.is_none() && log.last_ok(old).is_some_and(|last| last > named_at),
        told,
        reelected,
        vacant,
        overlap: log.overlaps().iter().map(|o| o.2).max().unwrap_or_default(),
        both_believed,
        observer_lag: Duration::ZERO,
        refused: log.refused.len(),
    }
}

/// The sentinels' events as each sentinel publishes them on its own pub/sub, with when the
/// suite heard them (Unix µs).
struct SentinelEvents {
    heard: Arc<Mutex<Vec<(String, u64)>>>,
    listeners: Vec<JoinHandle<()>>,
}

impl SentinelEvents {
    /// Subscribes to `+promoted-slave` and `+switch-master` on every sentinel (returned once
    /// every subscription is confirmed).
    async fn listen(urls: &[String]) -> SentinelEvents {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let mut listeners = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("a sentinel's URL");
            let mut pubsub = client
                .get_async_pubsub()
                .await
                .expect("a pub/sub connection to a sentinel");
            pubsub
                .subscribe(&["+promoted-slave", "+switch-master"])
                .await
                .expect("subscribe to the sentinel's events");
            let heard = heard.clone();
            listeners.push(tokio::spawn(async move {
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let channel = message.get_channel_name().to_owned();
                    lock_unpoisoned(&heard).push((channel, now_us()));
                }
            }));
        }
        SentinelEvents { heard, listeners }
    }

    /// When a sentinel first said `event`.
    fn first(&self, event: &str) -> Option<u64> {
        lock_unpoisoned(&self.heard)
            .iter()
            .filter(|(e, _)| e == event)
            .map(|(_, at)| *at)
            .min()
    }

    fn stop(self) {
        for listener in self.listeners {
            listener.abort();
        }
    }
}

/// Replication lag of [`just_elected`]: each replica gets the master's writes this late.
const LAG: Duration = Duration::from_millis(100);
/// [`just_elected`]'s lease: it outlives the failover, so its leader leads on after it.
const LONG_TTL: Duration = Duration::from_secs(6);

/// `SENTINEL FAILOVER` right after an election with every replica (`ALL_REPLICAS`): each
/// replica replicates through a delay line ([`LAG`]); a leader resigns, and the moment the next
/// term is said the lines hold everything still on its way, then the master is failed over.
/// The new term's lock was acknowledged by every replica before it was proclaimed, so it leads
/// on on the new master; the record (who leads, in which term), written after, must be there
/// too (`check_record`). Its note.
async fn just_elected(t: &Tally, round: u64) -> String {
    let (group, lines) = tokio::task::spawn_blocking(|| {
        let group = RedisSentinel::start_with(SentinelOptions {
            replicas: 2,
            down_after: DOWN_AFTER,
        });
        let lines = group.replicate_through_delay(LAG);
        (group, lines)
    })
    .await
    .expect("start the Sentinel group");
    let group = Arc::new(group);
    let urls = group.sentinel_urls();
    let events = SentinelEvents::listen(&urls).await;
    let urls = urls.join(",");
    let observer_client = election_log::connect("sentinel", &urls)
        .await
        .expect("the observer's client");
    let campaign = Campaign {
        kind: "sentinel",
        urls,
        name: format!("just-elected-{round}"),
        ttl: LONG_TTL,
        replicas: ALL_REPLICAS,
        // An acknowledgement takes two lags.
        replica_timeout: LAG * 10,
    };
    let label = "min_replicas all, ttl 6 s";
    let mut election = Election::start(label, &observer_client, &campaign, 2);
    let what = format!("{label} / SENTINEL FAILOVER right after an election");
    let Some((first, index)) = election.lead_after(t, 0, LONG_TTL * 2).await else {
        return format!("{what}: no leader");
    };
    let resigned_at = now_us();
    election.resign(index).await;
    // The next term: the moment it is said, nothing more reaches the replicas.
    let next = election
        .until_quick(LONG_TTL, |log| log.lead_after(resigned_at).is_some())
        .await;
    for line in &lines {
        line.hold(true);
    }
    let held_at = now_us();
    let elected = election.log().lead_after(resigned_at);
    let Some((second, elected_at)) = elected.filter(|_| next) else {
        t.violation(format!("{what}: no term after {first} resigned"));
        return format!("{what}: no second term");
    };
    // Set up or not: the term's record must still have been on its way.
    t.check(held_at < elected_at + LAG.as_micros() as u64, || {
        format!(
            "{what}: replication held {} ms after term {second} was said, past the {} ms lag: the case tested nothing",
            ms(span(elected_at, held_at)),
            ms(LAG)
        )
    });
    let fault_at = now_us();
    let faulty = group.clone();
    let new_master = tokio::task::spawn_blocking(move || {
        let old = faulty.master_port();
        faulty.start_failover();
        faulty.wait_for_promotion(old)
    })
    .await
    .expect("the failover");
    let named_at = events.first("+promoted-slave").unwrap_or_else(now_us);
    for line in &lines {
        line.hold(false);
    }
    // Led on the new master: `Ok` checks past the switch (clients hear of it within 0.5 s).
    let after = named_at + (SENTINEL_CHECK * 2).as_micros() as u64;
    let led_on = election
        .until(LONG_TTL, |log| {
            log.held.iter().any(|h| h.0 == second && h.1 > after) || log.lost_of(second).is_some()
        })
        .await;
    let on_new_master = record_on(new_master, &campaign.name).await;
    let ended = election.finish(t, TTL + TTL / 2).await;
    election_log::check(t, &what, &ended, (Duration::ZERO, TTL + SENTINEL_CHECK));
    election_log::check_record(t, &what, &ended, None);
    t.check(led_on, || {
        format!("{what}: term {second} neither led on nor was lost")
    });
    events.stop();
    let told = ended.log.lost_of(second);
    format!(
        "{what}: term {second} held {} ms after it was said, named {} ms after the failover; {}; `current()` said {:?}; on the new master {on_new_master}{}",
        ms(span(elected_at, held_at)),
        ms(span(fault_at, named_at)),
        match told {
            Some((at, why)) => format!("term {second} lost {} ms after the naming ({why})", ms(span(named_at, at))),
            None => format!("term {second} led on"),
        },
        ended.current.1,
        match ended.log.refused.len() {
            0 => String::new(),
            n => format!("; {n} campaigns refused (B8)"),
        }
    )
}

/// The election's lock and record on the server on `port`, as text (evidence for a note).
async fn record_on(port: u16, name: &str) -> String {
    let read = async {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let lock: Option<String> = redis::cmd("GET")
            .arg(format!("distlock:{{{name}}}"))
            .query_async(&mut conn)
            .await
            .ok()?;
        let record: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(format!("distlock:{{{name}}}:leader"))
            .arg("term")
            .arg("owner")
            .query_async(&mut conn)
            .await
            .ok()?;
        Some(format!(
            "the lock holds {lock:?}, the record names term {:?} owned by {:?}",
            record.first().cloned().flatten(),
            record.get(1).cloned().flatten()
        ))
    };
    tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| "not read".to_owned())
}
