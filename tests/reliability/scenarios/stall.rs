//! Scenario 15 (the stall row): holders frozen inside `run` for longer than their lease.
//!
//! N worker processes loop taking ONE shared lock through `distlock::lock(name).ttl(T)
//! .fenced(true).wait(..).run(body)`, the path `#[distributed_lock(.., fenced)]` expands to
//! (fencing tokens are handed out only to locks that ask for them); most sections have no
//! renewal, a fraction has `renew(true)`. Each body records its start (wall-clock µs, the same
//! clock in every process on this machine) and its fencing token, sleeps a random time shorter
//! than T, and records its end just before it returns. After `run` returns, the worker appends
//! one record per section (`pid start end token outcome renew finished`, outcome `ok`, `lost`
//! or `error`) to a Redis list on the test server.
//!
//! Meanwhile the suite `SIGSTOP`s a random holder for 1.5–3×T while the others keep taking the
//! lock, then `SIGCONT`s it. Most stalls are aimed: the suite waits for the victim to say it
//! entered a body (`IN`) and stops it right then, so the stall lands inside a critical section;
//! the others land at random moments (waiting, acquiring, releasing).
//!
//! Checks, over the records once every worker has finished:
//! * no two sections that returned `Ok` overlap in time (a holder whose lease elapsed while it
//!   was frozen must not report success: another holder had the lock meanwhile);
//! * the fencing tokens of `Ok` sections increase in start order;
//! * a section that spanned a whole stall (its lease certainly elapsed: the stall is longer
//!   than T and nothing renews a frozen process) did not return `Ok`;
//! * a short section (its body at most T/2) of a process no stall touched, without renewal,
//!   did not return `Lost` (its lease cannot have elapsed: a loss there is a theft, which the
//!   `Ok`-only checks would not see when `run` reports it);
//! * at least one stall landed inside a section, or the row proves nothing and fails.
//!
//! Row `15p` is the same with permits: the holders take one of the `N` permits of a semaphore
//! (`distlock::semaphore(name, N)`, more holders than permits) instead of the lock. Its checks:
//! at no instant more than `N` sections that returned `Ok` (and `N` reached, or the row proves
//! nothing), every `Ok` section's fencing token distinct (tokens rise in acquire order, which
//! concurrent holders do not record exactly), and no `Ok` section spanning a whole stall.
//!
//! Row `15r` is the same with shared holds: each section is a read (`lock(name).read()`) or,
//! at [`WRITE_PERCENT`], a write (the lock itself). Its checks: no `Ok` write section overlaps
//! any other `Ok` section (read or write), `Ok` reads overlap each other (at least 2 at once,
//! or the row proves nothing), fencing tokens are distinct and every `Ok` write's token is
//! above those of the `Ok` sections that ended before it began and below those that began
//! after it ended, and no `Ok` section spans a whole stall.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{Config, Error};
use redis::AsyncCommands;
use testkit::RedisServer;

use crate::common::{lock_unpoisoned, ms, redis_conn, Rng, Settings};
use crate::report::{Scenario, Tally};
use crate::worker::{field_u64, fields, Ctx, Worker};

/// The Redis list the workers append their section records to.
const RECORDS: &str = "stall:sections";
/// The one lock every holder takes.
const LOCK: &str = "stall";
/// Lease length: short, so a stall of a second or so outlives it several times over.
const TTL: Duration = Duration::from_millis(400);
/// Per cent of the stalls aimed at a critical section (the rest land at random moments).
const AIMED_PERCENT: u64 = 75;
/// Per cent of the sections taken with `renew(true)`.
const RENEW_PERCENT: u64 = 30;
/// Overlaps reported one by one; the rest are summed up in one more violation.
const MAX_LISTED: usize = 20;

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let (holders, stalls) = s.pick((3, 10), (6, 40));
    let title = format!(
        "lease stall: {holders} holders SIGSTOPped inside run() past their ttl ({stalls} stalls)"
    );
    let seed = s.seed;
    Scenario::new("15", title, budget, move |t| {
        run(t, (holders, 0, 0), stalls, seed)
    })
}

/// Row `15p`: the stall row over a semaphore of [`PERMITS`] permits.
pub(crate) fn permits_scenario(s: &Settings, budget: Duration) -> Scenario {
    let (holders, stalls) = s.pick((5, 10), (8, 40));
    let title = format!(
        "permit stall: {holders} holders of {PERMITS} permits SIGSTOPped inside run() past their ttl ({stalls} stalls)"
    );
    let seed = s.seed;
    Scenario::new("15p", title, budget, move |t| {
        run(t, (holders, PERMITS, 0), stalls, seed)
    })
}

/// Row `15r`: the stall row over shared holds, [`WRITE_PERCENT`] of the sections writes.
pub(crate) fn read_write_scenario(s: &Settings, budget: Duration) -> Scenario {
    let (holders, stalls) = s.pick((5, 10), (8, 40));
    let title = format!(
        "read/write stall: {holders} holders of reads and writes ({WRITE_PERCENT}% writes) SIGSTOPped inside run() past their ttl ({stalls} stalls)"
    );
    let seed = s.seed;
    Scenario::new("15r", title, budget, move |t| {
        run(t, (holders, 0, 100 - WRITE_PERCENT), stalls, seed)
    })
}

/// Per cent of row `15r`'s sections that are writes (the rest are reads).
const WRITE_PERCENT: u64 = 30;

/// The permits of row `15p`'s semaphore.
const PERMITS: u32 = 2;

/// Wall-clock microseconds since the epoch: comparable across the processes of one machine,
/// unlike `Instant`.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// One stall as the suite saw it: the victim was frozen for all of `[stopped, resumed]`.
pub(crate) struct Stall {
    pub(crate) pid: u64,
    /// Taken after `kill -STOP` returned, so the victim is surely frozen from here on.
    pub(crate) stopped: u64,
    /// Taken before `kill -CONT` is sent, so the victim is surely still frozen here.
    pub(crate) resumed: u64,
}

/// One record a worker appended after `run` returned.
#[derive(Debug)]
struct Record {
    pid: u64,
    start: u64,
    end: u64,
    token: u64,
    outcome: String,
    renew: bool,
    /// A read (row `15r`); every other section is exclusive.
    read: bool,
}

impl Record {
    fn parse(line: &str) -> Record {
        let f = fields(line);
        Record {
            pid: field_u64(line, "pid"),
            start: field_u64(line, "start"),
            end: field_u64(line, "end"),
            token: field_u64(line, "token"),
            outcome: f.get("outcome").copied().unwrap_or("?").to_owned(),
            renew: f.get("renew") == Some(&"1"),
            read: f.get("read") == Some(&"1"),
        }
    }

    fn ok(&self) -> bool {
        self.outcome == "ok"
    }

    /// True if this section was running (entered, not yet returned) across the whole stall.
    fn spans(&self, stall: &Stall) -> bool {
        self.pid == stall.pid && self.start < stall.stopped && self.end > stall.resumed
    }
}

impl Record {
    /// The record for a message, with times in ms after `base` (the first section's start).
    fn show(&self, base: u64) -> String {
        let at = |us: u64| us.saturating_sub(base) as f64 / 1000.0;
        format!(
            "[pid {} token {}{}{} {:.1}..{:.1} ms]",
            self.pid,
            self.token,
            if self.renew { " renewed" } else { "" },
            if self.read { " read" } else { "" },
            at(self.start),
            at(self.end)
        )
    }
}

/// `permits`: 0 for the lock, else the semaphore's count; `read_percent`: the per cent of
/// the lock's sections taken as reads (0: none).
async fn run(
    t: Arc<Tally>,
    (holders, permits, read_percent): (u64, u32, u64),
    stalls: u64,
    seed: u64,
) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let mut rng = Rng::new(seed);
    let ttl_ms = ms(TTL) as u64;
    let mut workers: Vec<Worker> = (0..holders)
        .map(|i| {
            Worker::spawn(
                format!("stall-{i}"),
                "stall",
                &[
                    ("url", server.url()),
                    ("ttl_ms", ttl_ms.to_string()),
                    // Sections last 25–75 % of the lease: never longer than T by themselves.
                    ("hold_min_ms", (ttl_ms / 4).to_string()),
                    ("hold_max_ms", (ttl_ms * 3 / 4).to_string()),
                    ("renew_percent", RENEW_PERCENT.to_string()),
                    ("permits", permits.to_string()),
                    ("read_percent", read_percent.to_string()),
                    ("seed", rng.next_u64().to_string()),
                ],
            )
        })
        .collect();
    let pids = start_workers(&mut workers).await;
    let (injected, aimed) = stall_holders(&t, &mut workers, &pids, (&mut rng, stalls, TTL)).await;
    // Every victim runs again; each worker ends its current section, reports and exits.
    let done = finish_workers(&t, &mut workers).await;
    let sum = |key: &str| done.iter().map(|line| field_u64(line, key)).sum::<u64>();
    let (sections, busy, unentered) = (sum("sections"), sum("busy"), sum("unentered"));

    let lines: Vec<String> = conn.lrange(RECORDS, 0, -1).await.expect("LRANGE records");
    let mut records: Vec<Record> = lines.iter().map(|l| Record::parse(l)).collect();
    records.sort_by_key(|r| (r.start, r.pid));
    t.ops(records.len() as u64);
    t.check(records.len() as u64 == sections, || {
        format!(
            "{} section records in Redis, but the workers ran {sections} sections",
            records.len()
        )
    });
    t.check(unentered == 0, || {
        format!("{unentered} lock calls failed before their body ran (see the workers' stderr)")
    });

    let (overlapped, out_of_order) = match (permits, read_percent) {
        (0, 0) => check_ok_sections(&t, &records),
        (0, _) => check_ok_reads_and_writes(&t, &records),
        (n, _) => check_ok_permits(&t, &records, n),
    };

    // Which sections a stall froze from start to finish: their lease elapsed for sure.
    let mut spanned = Vec::new();
    for stall in &injected {
        spanned.extend(records.iter().filter(|r| r.spans(stall)));
    }
    let spanned_ok: Vec<&&Record> = spanned.iter().filter(|r| r.ok()).collect();
    let base = records.first().map_or(0, |r| r.start);
    for r in &spanned_ok {
        t.violation(format!(
            "section {} returned Ok though a stall longer than its {} ms ttl froze it",
            r.show(base),
            ms(TTL)
        ));
    }
    // Without a stall inside a section the row exercised nothing: fail it rather than pass.
    t.check(!spanned.is_empty(), || {
        "no stall hit a critical section: the row proves nothing".to_owned()
    });
    let (safe, unexplained) = check_unexplained_losses(&t, &records, &injected);

    let count = |outcome: &str| {
        let of: Vec<&Record> = records.iter().filter(|r| r.outcome == outcome).collect();
        format!(
            "{outcome} {} ({} renewed)",
            of.len(),
            of.iter().filter(|r| r.renew).count()
        )
    };
    t.note(format!(
        "seed {seed}; ttl {} ms; {} sections: {}, {}, {}; {busy} Busy retried",
        ms(TTL),
        records.len(),
        count("ok"),
        count("lost"),
        count("error"),
    ));
    t.note(format!(
        "{} stalls of 1.5-3x ttl ({aimed} aimed at a section entry); {} sections spanned a whole stall: {} returned Ok, {} Lost, {} another error",
        injected.len(),
        spanned.len(),
        spanned_ok.len(),
        spanned.iter().filter(|r| r.outcome == "lost").count(),
        spanned.iter().filter(|r| r.outcome == "error").count(),
    ));
    t.note(format!(
        "{unexplained} of {safe} short sections no stall touched lost their lease (each one a violation)"
    ));
    if read_percent > 0 {
        t.note(format!(
            "{overlapped} Ok writes overlapped by another Ok section; {out_of_order} Ok sections with a token out of order around a write, or repeated"
        ));
    } else if permits == 0 {
        t.note(format!(
            "{overlapped} Ok sections overlapped by later Ok sections, {out_of_order} Ok sections with a token not above the previous one"
        ));
    } else {
        t.note(format!(
            "at most {overlapped} Ok sections at once (permits {permits}); {out_of_order} Ok sections with a token another had"
        ));
    }
}

/// A section whose process no stall touched (from a lease before it began to its end), that
/// renewed nothing and whose body took at most half the lease, cannot have outlived its
/// lease: `Lost` there means another holder took what it held (exclusion broke, and `run`
/// caught the theft afterwards), which the `Ok`-only checks alone would not see. Returns how
/// many sections were so (short, untouched, not renewed) and how many of them were `Lost`, each
/// a violation.
fn check_unexplained_losses(t: &Tally, records: &[Record], stalls: &[Stall]) -> (usize, usize) {
    let base = records.first().map_or(0, |r| r.start);
    let ttl_us = TTL.as_micros() as u64;
    let touched = |r: &Record| {
        stalls.iter().any(|s| {
            s.pid == r.pid && s.stopped < r.end && s.resumed > r.start.saturating_sub(ttl_us)
        })
    };
    let safe: Vec<&Record> = records
        .iter()
        .filter(|r| !r.renew && r.end.saturating_sub(r.start) <= ttl_us / 2 && !touched(r))
        .collect();
    let unexplained: Vec<&&Record> = safe.iter().filter(|r| r.outcome == "lost").collect();
    for r in unexplained.iter().take(MAX_LISTED) {
        t.violation(format!(
            "section {} lost its lease though no stall froze it and its body took under half the {} ms ttl: another holder took it",
            r.show(base),
            ms(TTL)
        ));
    }
    if unexplained.len() > MAX_LISTED {
        t.violation(format!(
            "... and {} more sections lost without a stall",
            unexplained.len() - MAX_LISTED
        ));
    }
    (safe.len(), unexplained.len())
}

/// Waits for every worker's `READY` and sends each `GO`; returns their pids.
pub(crate) async fn start_workers(workers: &mut [Worker]) -> Vec<u64> {
    let mut pids = Vec::new();
    for w in workers.iter_mut() {
        let ready = w.expect("READY", Duration::from_secs(20)).await;
        pids.push(field_u64(&ready, "pid"));
    }
    for w in workers.iter_mut() {
        w.send("GO").await;
    }
    pids
}

/// `stalls` times, a random holder of `workers` (pids `pids`) is `SIGSTOP`ped for 1.5–3× `ttl`
/// and resumed: most stalls aimed at a section entry (the victim's `IN` line), the rest
/// wherever it is. Returns the stalls and how many were aimed.
pub(crate) async fn stall_holders(
    t: &Tally,
    workers: &mut [Worker],
    pids: &[u64],
    (rng, stalls, ttl): (&mut Rng, u64, Duration),
) -> (Vec<Stall>, u64) {
    let holders = workers.len() as u64;
    let mut injected = Vec::new();
    let mut aimed = 0;
    for _ in 0..stalls {
        tokio::time::sleep(rng.millis(100, 500)).await;
        let victim = rng.below(holders) as usize;
        // Drop what every worker said so far: an aimed stall must react to a fresh `IN`.
        for w in workers.iter_mut() {
            while w.next_line(Duration::ZERO).await.is_some() {}
        }
        if rng.percent(AIMED_PERCENT) {
            // The victim may queue behind every other holder first; give up after a few
            // sections' worth and stall it wherever it is.
            let within = ttl * (holders as u32 + 4);
            let deadline = tokio::time::Instant::now() + within;
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                match workers[victim].next_line(left).await {
                    Some(line) if line.starts_with("IN") => {
                        aimed += 1;
                        break;
                    }
                    Some(_) => continue,
                    None => break,
                }
            }
        }
        let w = &workers[victim];
        w.signal("STOP");
        let stopped = now_us();
        t.faults(1);
        let pause = ttl.mul_f64(1.5 + rng.below(1001) as f64 * 1.5 / 1000.0);
        tokio::time::sleep(pause).await;
        let resumed = now_us();
        w.signal("CONT");
        injected.push(Stall {
            pid: pids[victim],
            stopped,
            resumed,
        });
    }
    (injected, aimed)
}

/// Tells every worker to `FINISH` and waits for its `DONE` line and a clean exit (a worker
/// stuck waiting for a lock, a deadlock, never says `DONE`: the row fails there); returns the
/// `DONE` lines.
pub(crate) async fn finish_workers(t: &Tally, workers: &mut [Worker]) -> Vec<String> {
    for w in workers.iter_mut() {
        w.send("FINISH").await;
    }
    let mut done = Vec::new();
    for w in workers.iter_mut() {
        done.push(w.expect("DONE", Duration::from_secs(30)).await);
        let code = w.finish(Duration::from_secs(10)).await;
        t.check(code == Some(0), || {
            format!(
                "worker {} exited with {code:?}: {}",
                w.name(),
                w.stderr_tail()
            )
        });
    }
    done
}

/// Row `15p`: at no instant more than `permits` sections that returned `Ok`, and `permits`
/// reached; no two `Ok` sections with the same fencing token. Returns the most `Ok` sections
/// at once and the count of repeated tokens.
fn check_ok_permits(t: &Tally, records: &[Record], permits: u32) -> (usize, usize) {
    let base = records.first().map_or(0, |r| r.start);
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    // Ends before starts at the same instant: a section that ended as another began is not
    // inside it.
    let mut events: Vec<(u64, i64, &Record)> = ok
        .iter()
        .flat_map(|r| [(r.start, 1, *r), (r.end, -1, *r)])
        .collect();
    events.sort_by_key(|&(at, step, _)| (at, step));
    let (mut inside, mut most, mut over) = (0i64, 0i64, 0usize);
    for (_, step, r) in events {
        inside += step;
        most = most.max(inside);
        if step > 0 && inside > i64::from(permits) {
            over += 1;
            if over <= MAX_LISTED {
                t.violation(format!(
                    "Ok section {} began while {} other Ok sections ran: more than {permits} permits held",
                    r.show(base),
                    inside - 1
                ));
            }
        }
    }
    if over > MAX_LISTED {
        t.violation(format!(
            "... and {} more Ok sections beyond the permits",
            over - MAX_LISTED
        ));
    }
    t.check(most >= i64::from(permits), || {
        format!(
            "never {permits} Ok sections at once (at most {most}): the permits were not contended"
        )
    });
    let mut tokens: Vec<u64> = ok.iter().map(|r| r.token).collect();
    tokens.sort_unstable();
    let repeated = tokens.windows(2).filter(|w| w[0] == w[1]).count();
    t.check(repeated == 0, || {
        format!("{repeated} Ok sections had a fencing token another Ok section had")
    });
    (usize::try_from(most).unwrap_or(0), repeated)
}

/// Row `15r`: no `Ok` write overlaps any other `Ok` section, `Ok` reads overlap each other (2
/// at once reached), tokens distinct, and each `Ok` write's token above those of the `Ok`
/// sections that ended before it began and below those that began after it ended. Returns the
/// writes overlapped and the tokens out of order (or repeated).
fn check_ok_reads_and_writes(t: &Tally, records: &[Record]) -> (usize, usize) {
    let base = records.first().map_or(0, |r| r.start);
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let (mut overlapped, mut out_of_order) = (0, 0);
    for w in ok.iter().filter(|r| !r.read) {
        let others = ok.iter().filter(|o| !std::ptr::eq(**o, *w));
        let inside: Vec<&&Record> = others
            .clone()
            .filter(|o| o.start < w.end && o.end > w.start)
            .collect();
        if let Some(first) = inside.first() {
            overlapped += 1;
            if overlapped <= MAX_LISTED {
                t.violation(format!(
                    "Ok write {} overlaps {} other Ok section(s), the first {}",
                    w.show(base),
                    inside.len(),
                    first.show(base)
                ));
            }
        }
        let wrong = others
            .filter(|o| {
                (o.end <= w.start && o.token >= w.token) || (o.start >= w.end && o.token <= w.token)
            })
            .count();
        if wrong > 0 {
            out_of_order += wrong;
            if out_of_order <= MAX_LISTED {
                t.violation(format!(
                    "Ok write {}: {wrong} Ok section(s) before or after it with a token on the wrong side",
                    w.show(base)
                ));
            }
        }
    }
    if overlapped > MAX_LISTED {
        t.violation(format!(
            "... and {} more Ok writes overlapped",
            overlapped - MAX_LISTED
        ));
    }
    // Ends before starts at the same instant: reads that touch do not overlap.
    let mut events: Vec<(u64, i64)> = ok
        .iter()
        .filter(|r| r.read)
        .flat_map(|r| [(r.start, 1), (r.end, -1)])
        .collect();
    events.sort_unstable();
    let (mut inside, mut most) = (0i64, 0i64);
    for (_, step) in events {
        inside += step;
        most = most.max(inside);
    }
    t.check(most >= 2, || {
        format!("Ok reads never overlapped (at most {most} at once): the reads were not shared")
    });
    let mut tokens: Vec<u64> = ok.iter().map(|r| r.token).collect();
    tokens.sort_unstable();
    let repeated = tokens.windows(2).filter(|w| w[0] == w[1]).count();
    t.check(repeated == 0, || {
        format!("{repeated} Ok sections had a fencing token another Ok section had")
    });
    t.note(format!(
        "{} Ok reads ({most} at most at once), {} Ok writes",
        ok.iter().filter(|r| r.read).count(),
        ok.iter().filter(|r| !r.read).count()
    ));
    (overlapped, out_of_order + repeated)
}

/// Sections that returned `Ok` must be disjoint in time, with fencing tokens rising in start
/// order (`records` is sorted by start). One violation per Ok section that later Ok sections
/// started inside of, and per out-of-order token. Returns both counts.
fn check_ok_sections(t: &Tally, records: &[Record]) -> (usize, usize) {
    let base = records.first().map_or(0, |r| r.start);
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let mut overlapped = 0;
    for (i, r) in ok.iter().enumerate() {
        // Sorted by start: the sections that began before `r` ended are the ones right after it.
        let inside: Vec<&&Record> = ok[i + 1..]
            .iter()
            .take_while(|later| later.start < r.end)
            .collect();
        if let Some(first) = inside.first() {
            overlapped += 1;
            if overlapped <= MAX_LISTED {
                t.violation(format!(
                    "Ok section {} overlaps {} later Ok section(s), the first {} by {:.1} ms",
                    r.show(base),
                    inside.len(),
                    first.show(base),
                    (r.end - first.start) as f64 / 1000.0
                ));
            }
        }
    }
    if overlapped > MAX_LISTED {
        t.violation(format!(
            "... and {} more Ok sections overlapped by later Ok sections",
            overlapped - MAX_LISTED
        ));
    }
    let mut out_of_order = 0;
    for pair in ok.windows(2) {
        if pair[1].token <= pair[0].token {
            out_of_order += 1;
            if out_of_order <= MAX_LISTED {
                t.violation(format!(
                    "fencing tokens of Ok sections do not rise in start order: {} then {}",
                    pair[0].show(base),
                    pair[1].show(base)
                ));
            }
        }
    }
    if out_of_order > MAX_LISTED {
        t.violation(format!(
            "... and {} more Ok sections with a token not above the previous one",
            out_of_order - MAX_LISTED
        ));
    }
    (overlapped, out_of_order)
}

/// What the body of the current section recorded (the body's own output is gone when `run`
/// returns an error, so it writes here instead).
#[derive(Default)]
struct Entered {
    start: u64,
    token: Option<u64>,
    /// Set just before the body returns; `None` if the body was cancelled.
    end: Option<u64>,
}

/// Worker role `stall`: takes the shared lock through `run` in a loop until told `FINISH`,
/// appending one record per section to the Redis list.
pub(crate) async fn worker(mut ctx: Ctx) -> Result<(), String> {
    let url = ctx.param("url").to_owned();
    let ttl = Duration::from_millis(ctx.num("ttl_ms"));
    let (hold_min, hold_max) = (ctx.num("hold_min_ms"), ctx.num("hold_max_ms"));
    let renew_percent = ctx.num("renew_percent");
    let permits = u32::try_from(ctx.num("permits")).map_err(|e| e.to_string())?;
    let read_percent = ctx.num("read_percent");
    let mut rng = Rng::new(ctx.num("seed"));
    // The default (2 s) timeouts: no Redis faults here, and a reply that came in while this
    // process was frozen must not count as late.
    Config::new(url.as_str())
        .install()
        .await
        .map_err(|e| e.to_string())?;
    let mut conn = redis_conn(&url).await?;
    let pid = std::process::id();
    ctx.say(format!("READY pid={pid}"));
    let go = ctx.command().await;
    if go != "GO" {
        return Err(format!("expected GO, got `{go}`"));
    }

    let (mut sections, mut busy, mut unentered) = (0u64, 0u64, 0u64);
    for n in 1.. {
        // Look for FINISH between sections only, so no section is cut short by it.
        if let Ok(command) = tokio::time::timeout(Duration::ZERO, ctx.command()).await {
            match command.as_str() {
                "FINISH" => break,
                other => return Err(format!("unexpected command `{other}`")),
            }
        }
        let renew = rng.percent(renew_percent);
        // Drawn only in row `15r`, so the other rows' seeds replay as before.
        let read = read_percent > 0 && rng.percent(read_percent);
        let hold = rng.millis(hold_min, hold_max);
        let entered = Mutex::new(None::<Entered>);
        let body = async {
            *lock_unpoisoned(&entered) = Some(Entered {
                start: now_us(),
                token: distlock::fencing_token(),
                end: None,
            });
            // Tell the suite a section is open, so it can freeze this process inside it.
            ctx.say(format!("IN n={n}"));
            tokio::time::sleep(hold).await;
            if let Some(e) = lock_unpoisoned(&entered).as_mut() {
                e.end = Some(now_us());
            }
        };
        let lock = match (permits, read) {
            (0, false) => distlock::lock(LOCK),
            (0, true) => distlock::lock(LOCK).read(),
            (n, _) => distlock::semaphore(LOCK, n),
        };
        let result = lock
            .ttl(ttl)
            .renew(renew)
            .fenced(true)
            .wait(Duration::from_secs(60))
            .run(body)
            .await;
        let returned = now_us();
        let Some(section) = lock_unpoisoned(&entered).take() else {
            // The body never ran: nothing to record.
            match result {
                Err(e) if e.is_busy() => busy += 1,
                Err(e) => {
                    eprintln!("lock call failed before its body ran: {e}");
                    unentered += 1;
                }
                Ok(()) => return Err("run returned Ok without running the body".to_owned()),
            }
            continue;
        };
        let outcome = match &result {
            Ok(()) => "ok",
            Err(Error::Lost { .. }) => "lost",
            Err(e) => {
                eprintln!("section {n} ended with {e}");
                "error"
            }
        };
        let Some(token) = section.token else {
            return Err("a body run under a fenced lock saw no fencing token".to_owned());
        };
        let record = format!(
            "pid={pid} start={} end={} token={token} outcome={outcome} renew={} read={} finished={}",
            section.start,
            section.end.unwrap_or(returned),
            u8::from(renew),
            u8::from(read),
            u8::from(section.end.is_some()),
        );
        let _: i64 = conn
            .rpush(RECORDS, record)
            .await
            .map_err(|e| format!("RPUSH record: {e}"))?;
        sections += 1;
    }
    ctx.say(format!(
        "DONE sections={sections} busy={busy} unentered={unentered}"
    ));
    Ok(())
}
