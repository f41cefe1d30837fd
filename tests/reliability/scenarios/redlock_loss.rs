//! Scenario 17: RedLock (`Config::redlock`) over five independent masters loses them one by one
//! in the middle of a fenced counter race, then gets them back.
//!
//! Clients race to increment one counter under one fenced lock (read, yield, write: only
//! exclusion keeps it exact). The counter lives in this process, with a flag that counts
//! overlapping bodies and the last fencing token seen inside a body. A separate client holds
//! a renewed lock throughout. The phases:
//!
//! 1. all five masters up;
//! 2. two masters killed (`SIGKILL`): a majority (3 of 5) is left, locks keep working and the
//!    renewed lock stays held;
//! 3. a third killed: no majority. Acquires fail with `Error::NoQuorum`, no body may start
//!    once the leases granted before the kill have run out, and the renewed holder must be
//!    told (`lost()` resolves) within its lease;
//! 4. the three killed masters restarted (empty: no persistence) after at least one ttl, as
//!    RedLock requires of a master that lost its data: locks work again.
//!
//! Invariants: no two bodies overlap; the counter equals the bodies that completed; every
//! body's fencing token is larger than the previous body's; sections complete in phases 1, 2
//! and 4 and none starts in phase 3 after the leases ran out; the renewed lock is held through
//! phase 2 and reported lost in phase 3.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Client, Config, Error};
use testkit::RedisServer;
use tokio::time::Instant;

use crate::common::{lock_unpoisoned, Settings};
use crate::report::{Scenario, Tally};

const MASTERS: usize = 5;
/// The race's lease: phase 3 waits this long past the majority's loss before it requires
/// that no body starts.
const TTL: Duration = Duration::from_secs(2);
/// The renewed holder's lease: it must learn of the loss within this (plus slack).
const HELD_TTL: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let clients = s.pick(4, 8);
    Scenario::new(
        "17",
        format!(
            "RedLock over {MASTERS} masters: 2 killed, then a 3rd (no majority), then restarted; {clients} clients, fenced"
        ),
        budget,
        move |t| run(t, clients),
    )
}

/// The phase the race is in (an index into `Race::ok_in`).
const ALL_UP: usize = 0;
const TWO_DOWN: usize = 1;
const NO_MAJORITY: usize = 2;
const RESTARTED: usize = 3;

/// What the workers share.
struct Race {
    /// The protected counter (read, yield, write).
    counter: AtomicU64,
    /// Bodies running right now (more than one: an overlap).
    inside: AtomicUsize,
    overlaps: AtomicU64,
    /// Bodies that wrote their increment.
    completed: AtomicU64,
    /// The last fencing token a body saw, and bodies whose token was not above it.
    last_token: Mutex<u64>,
    token_regressions: AtomicU64,
    phase: AtomicUsize,
    /// `Ok` sections per phase.
    ok_in: [AtomicU64; 4],
    /// Set once the leases granted before the majority was lost have run out: a body that
    /// starts after it had no majority behind it.
    leases_out: AtomicBool,
    started_without_majority: AtomicU64,
    no_quorum: AtomicU64,
    busy: AtomicU64,
    lost: AtomicU64,
    other: AtomicU64,
    stop: AtomicBool,
}

impl Race {
    fn new() -> Self {
        Race {
            counter: AtomicU64::new(0),
            inside: AtomicUsize::new(0),
            overlaps: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            last_token: Mutex::new(0),
            token_regressions: AtomicU64::new(0),
            phase: AtomicUsize::new(ALL_UP),
            ok_in: Default::default(),
            leases_out: AtomicBool::new(false),
            started_without_majority: AtomicU64::new(0),
            no_quorum: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            other: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }
    }

    /// One critical section: checks exclusion and the token, then read, yield, write.
    async fn body(&self) {
        if self.inside.fetch_add(1, Ordering::AcqRel) > 0 {
            self.overlaps.fetch_add(1, Ordering::AcqRel);
        }
        let _inside = Inside(self);
        if self.leases_out.load(Ordering::Acquire) {
            self.started_without_majority.fetch_add(1, Ordering::AcqRel);
        }
        let token = distlock::fencing_token().unwrap_or(0);
        {
            let mut last = lock_unpoisoned(&self.last_token);
            if token <= *last {
                self.token_regressions.fetch_add(1, Ordering::AcqRel);
            }
            *last = (*last).max(token);
        }
        let n = self.counter.load(Ordering::Acquire);
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.counter.store(n + 1, Ordering::Release);
        self.completed.fetch_add(1, Ordering::AcqRel);
    }
}

/// Leaves the body's section when dropped (completed or cancelled).
struct Inside<'a>(&'a Race);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn client(urls: &[String]) -> Client {
    Config::redlock(urls.iter().cloned())
        .response_timeout(RESPONSE_TIMEOUT)
        .connect_timeout(RESPONSE_TIMEOUT)
        .connect()
        .await
        .expect("a RedLock client")
}

async fn worker(client: Client, race: Arc<Race>) {
    while !race.stop.load(Ordering::Acquire) {
        let result = client
            .lock("counter")
            .ttl(TTL)
            .fenced(true)
            .wait(Duration::from_secs(1))
            .run(race.body())
            .await;
        let count = match &result {
            Ok(()) => &race.ok_in[race.phase.load(Ordering::Acquire)],
            Err(Error::NoQuorum { .. }) => &race.no_quorum,
            Err(e) if e.is_busy() => &race.busy,
            Err(e) if e.is_lost() => &race.lost,
            Err(_) => &race.other,
        };
        count.fetch_add(1, Ordering::AcqRel);
        if result.is_err() {
            // Refused or failed: not a hot loop against missing masters.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Kills (or, with `restart`, starts again) the masters at `which`, off the runtime.
async fn with_masters(
    masters: Vec<RedisServer>,
    which: std::ops::Range<usize>,
    restart: bool,
) -> Vec<RedisServer> {
    tokio::task::spawn_blocking(move || {
        let mut masters = masters;
        for master in &mut masters[which] {
            if restart {
                master.restart();
            } else {
                master.kill();
            }
        }
        masters
    })
    .await
    .expect("kill or restart masters")
}

async fn run(t: Arc<Tally>, clients: usize) {
    let masters = tokio::task::spawn_blocking(|| {
        (0..MASTERS)
            .map(|_| RedisServer::start())
            .collect::<Vec<_>>()
    })
    .await
    .expect("start the masters");
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let race = Arc::new(Race::new());
    let mut tasks = Vec::new();
    for _ in 0..clients {
        tasks.push(tokio::spawn(worker(client(&urls).await, race.clone())));
    }
    let holder = client(&urls).await;
    let held = holder
        .lock("held")
        .ttl(HELD_TTL)
        .renew(true)
        .acquire()
        .await
        .expect("the renewed lock, all masters up");
    let mut lost = std::pin::pin!(held.lost());
    let phase = |p: usize| race.phase.store(p, Ordering::Release);
    let mut violations_of_held = Vec::new();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let masters = with_masters(masters, 0..2, false).await;
    t.faults(2);
    phase(TWO_DOWN);
    if tokio::time::timeout(Duration::from_secs(2), &mut lost)
        .await
        .is_ok()
    {
        violations_of_held.push("the renewed lock was lost with a majority still up".to_owned());
    }

    let masters = with_masters(masters, 2..3, false).await;
    let majority_lost = Instant::now();
    t.faults(1);
    phase(NO_MAJORITY);
    let told_within = HELD_TTL + Duration::from_secs(1);
    let told = tokio::time::timeout(told_within, &mut lost).await;
    let told_after = majority_lost.elapsed();
    if told.is_err() {
        violations_of_held.push(format!(
            "the renewed lock was not reported lost within {told_within:?} of the majority's loss"
        ));
    }
    // Every lease granted before the kill (validity < ttl) has run out by now.
    tokio::time::sleep_until(majority_lost + TTL).await;
    race.leases_out.store(true, Ordering::Release);
    tokio::time::sleep(Duration::from_secs(1)).await;

    race.leases_out.store(false, Ordering::Release);
    let masters = with_masters(masters, 0..3, true).await;
    phase(RESTARTED);
    tokio::time::sleep(Duration::from_secs(3)).await;
    race.stop.store(true, Ordering::Release);
    for task in tasks {
        task.await.expect("worker");
    }
    let release = held.release().await;

    let load = |n: &AtomicU64| n.load(Ordering::Acquire);
    let ok: Vec<u64> = race.ok_in.iter().map(load).collect();
    let (completed, counter) = (load(&race.completed), load(&race.counter));
    let refused = load(&race.no_quorum) + load(&race.busy) + load(&race.lost) + load(&race.other);
    t.ops(ok.iter().sum::<u64>() + refused);
    t.check(load(&race.overlaps) == 0, || {
        format!("{} bodies overlapped another", load(&race.overlaps))
    });
    t.check(counter == completed, || {
        format!("counter {counter} != {completed} completed increments (a lost update)")
    });
    t.check(load(&race.token_regressions) == 0, || {
        format!(
            "{} bodies saw a fencing token not above the previous body's",
            load(&race.token_regressions)
        )
    });
    t.check(load(&race.started_without_majority) == 0, || {
        format!(
            "{} bodies started with 3 of 5 masters down, after every earlier lease had run out",
            load(&race.started_without_majority)
        )
    });
    for (p, what) in [
        (ALL_UP, "with every master up"),
        (TWO_DOWN, "with two masters down"),
        (RESTARTED, "after the masters were restarted"),
    ] {
        t.check(ok[p] > 0, || format!("no section completed {what}"));
    }
    t.check(load(&race.no_quorum) > 0, || {
        "no acquire failed with NoQuorum while 3 of 5 masters were down".into()
    });
    for violation in violations_of_held {
        t.violation(violation);
    }
    t.check(release.is_err(), || {
        "the renewed lock's release succeeded although it was lost".into()
    });
    t.note(format!(
        "Ok sections: {} all up, {} with 2 down, {} with no majority (leases from before), {} after the restart; counter {counter}; refused: {} NoQuorum, {} busy, {} lost, {} other; renewed lock reported lost {} ms after the majority's loss",
        ok[ALL_UP],
        ok[TWO_DOWN],
        ok[NO_MAJORITY],
        ok[RESTARTED],
        load(&race.no_quorum),
        load(&race.busy),
        load(&race.lost),
        load(&race.other),
        told_after.as_millis(),
    ));
    drop(masters);
}
