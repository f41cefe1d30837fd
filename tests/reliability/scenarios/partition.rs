//! Scenario 19: holder-targeted partitions. Four clients, each through its own fault proxy to
//! one server, take turns on one renewed lock (ttl 1 s) with `run`, holding it 200–1,200 ms.
//! A controller cuts off **whoever holds the lock right now** (its proxy black-holes every
//! byte, connections stay open) for 1.2–3 s, again and again, so the holder's renewals stall
//! past its lease while the others can still reach Redis and take the lock once its key
//! expires.
//!
//! Invariants: no two sections whose `run` returned `Ok` overlap in time (start of the body to
//! its end, on this process's clock); every section a partition spanned past its lease
//! returned `Err(Lost)`; sections still complete between the faults. The note counts `Ok`,
//! `Lost` and other outcomes, the partitions, and how many of them hit a body.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::Client;
use testkit::RedisServer;
use tokio::time::Instant;

use crate::common::{fast_config, Rng, Settings};
use crate::report::{Scenario, Tally};
use testkit::proxy::Proxy;

const TTL: Duration = Duration::from_secs(1);
/// Marks "nobody inside" in [`Shared::inside`].
const NOBODY: usize = usize::MAX;

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let run_for = Duration::from_secs(s.pick(16, 60));
    let seed = s.seed;
    Scenario::new(
        "19",
        format!(
            "holder-targeted partitions: 4 clients via fault proxies, the holder black-holed 1.2-3 s again and again ({} s)",
            run_for.as_secs()
        ),
        budget,
        move |t| run(t, run_for, seed),
    )
}

/// One body's section: when it ran (start to completion), and what `run` returned.
struct Section {
    client: usize,
    start: Instant,
    end: Instant,
    ok: bool,
}

#[derive(Default)]
struct Shared {
    sections: Mutex<Vec<Section>>,
    /// The client whose body runs now (`NOBODY`: none).
    inside: AtomicUsize,
    lost: AtomicU64,
    other: AtomicU64,
}

async fn run(t: Arc<Tally>, run_for: Duration, seed: u64) {
    let server = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let mut rng = Rng::new(seed);
    let mut proxies = Vec::new();
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..4 {
        let proxy = Proxy::start(upstream).await;
        clients.push(
            fast_config(&proxy.url())
                .connect()
                .await
                .expect("connect through the proxy"),
        );
        proxies.push(Arc::new(proxy));
    }
    let shared = Arc::new(Shared {
        inside: AtomicUsize::new(NOBODY),
        ..Shared::default()
    });
    let end = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let (shared, mut rng) = (shared.clone(), rng.fork());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let hold = rng.millis(200, 1200);
                // When the body started, and when it ended (`None`: cancelled).
                let span = Arc::new(Mutex::new((None, None)));
                let body = {
                    let (shared, span) = (shared.clone(), span.clone());
                    async move {
                        span.lock().unwrap().0 = Some(Instant::now());
                        shared.inside.store(i, Ordering::Release);
                        tokio::time::sleep(hold).await;
                        shared.inside.store(NOBODY, Ordering::Release);
                        span.lock().unwrap().1 = Some(Instant::now());
                    }
                };
                let result = client
                    .lock("partitioned")
                    .ttl(TTL)
                    .renew(true)
                    .wait(Duration::from_secs(5))
                    .run(body)
                    .await;
                let _ =
                    shared
                        .inside
                        .compare_exchange(i, NOBODY, Ordering::AcqRel, Ordering::Acquire);
                // A body ends when it completes (or, cancelled, when `run` returns).
                let (start, ended) = *span.lock().unwrap();
                if let Some(start) = start {
                    shared.sections.lock().unwrap().push(Section {
                        client: i,
                        start,
                        end: ended.unwrap_or_else(Instant::now),
                        ok: result.is_ok(),
                    });
                }
                match &result {
                    Ok(()) => {}
                    Err(e) if e.is_lost() => {
                        shared.lost.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(_) => {
                        shared.other.fetch_add(1, Ordering::AcqRel);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }

    // The controller: cut off whoever is inside, for 1.2-3 s, then let it heal a while.
    let mut partitions = 0u64;
    let mut hit_inside = 0u64;
    let mut cuts: Vec<(usize, Instant, Instant)> = Vec::new();
    while Instant::now() + Duration::from_secs(4) < end {
        tokio::time::sleep(rng.millis(300, 1500)).await;
        let holder = shared.inside.load(Ordering::Acquire);
        if holder == NOBODY {
            continue;
        }
        let cut = rng.millis(1200, 3000);
        proxies[holder].set_blackhole(true);
        let from = Instant::now();
        tokio::time::sleep(cut).await;
        proxies[holder].set_blackhole(false);
        partitions += 1;
        hit_inside += 1;
        cuts.push((holder, from, Instant::now()));
    }
    for task in tasks {
        task.await.expect("racer");
    }
    t.faults(partitions);

    let sections = std::mem::take(&mut *shared.sections.lock().unwrap());
    let ok: Vec<&Section> = sections.iter().filter(|s| s.ok).collect();
    t.ops(sections.len() as u64);
    // Overlapping `Ok` sections (sorted by start, each against the next).
    let mut sorted = ok.clone();
    sorted.sort_by_key(|s| s.start);
    let mut overlaps = 0;
    let mut worst = Duration::ZERO;
    for pair in sorted.windows(2) {
        if pair[1].start < pair[0].end {
            overlaps += 1;
            worst = worst.max(pair[0].end - pair[1].start);
        }
    }
    t.check(overlaps == 0, || {
        format!("{overlaps} Ok sections overlapped the next (worst {worst:?})")
    });
    // A body cut off at `from` cannot have been renewed after it: its lease ended by
    // `from + TTL`, so a section that went on past that (while still cut off) is not `Ok`.
    let spanned_ok = ok
        .iter()
        .filter(|s| {
            cuts.iter().any(|&(c, from, to)| {
                c == s.client && s.start < from && s.end > from + TTL && to > from + TTL
            })
        })
        .count();
    t.check(spanned_ok == 0, || {
        format!("{spanned_ok} Ok sections ran through a partition longer than their lease")
    });
    t.check(ok.len() >= 5, || {
        format!(
            "only {} Ok sections: the lock stopped changing hands",
            ok.len()
        )
    });
    t.note(format!(
        "{} Ok, {} Lost, {} other (busy waits, timeouts); {partitions} partitions of the holder ({hit_inside} inside a body); worst overlap {} ms",
        ok.len(),
        shared.lost.load(Ordering::Acquire),
        shared.other.load(Ordering::Acquire),
        worst.as_millis()
    ));
}
