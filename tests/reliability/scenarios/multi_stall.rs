//! Row `15m`: the stall row over sets of locks taken together (`distlock::lock_all`, the path
//! `#[distributed_lock(key = [...], fenced)]` expands to).
//!
//! N worker processes loop making "transfers": each section takes two of [`ACCOUNTS`] account
//! locks at once, named in a random order, now and then the same account twice (`from ==
//! to`: one lock), fenced, a fraction with `renew(true)`; the body records its start, each
//! account's fencing token ([`distlock::fencing_token_of`]) and its end. Meanwhile the suite
//! `SIGSTOP`s a random holder for 1.5–3× the ttl (most stalls aimed at a section's entry) while
//! the others go on.
//!
//! Checks, over the records once every worker has finished:
//! * per account, no two `Ok` sections holding it overlap in time (all or none: a section holds
//!   every account of its set for its whole length);
//! * per account, the fencing tokens of the `Ok` sections holding it rise in start order;
//! * a section that spanned a whole stall did not return `Ok`;
//! * no section waited forever (every worker finishes: no deadlock across the key orders), at
//!   least one stall landed inside a section, and sets of two accounts ran.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Config, Error};
use redis::AsyncCommands;
use testkit::RedisServer;

use crate::common::{lock_unpoisoned, ms, redis_conn, Rng, Settings};
use crate::report::{Scenario, Tally};
use crate::worker::{field_u64, fields, Ctx, Worker};

use super::stall::{finish_workers, now_us, stall_holders, start_workers, Stall};

/// The Redis list the workers append their section records to.
const RECORDS: &str = "multi:sections";
/// The accounts whose locks the sections take two at a time.
const ACCOUNTS: u64 = 3;
/// Lease length: short, so a stall of a second or so outlives it several times over.
const TTL: Duration = Duration::from_millis(400);
/// Per cent of the sections taken with `renew(true)`.
const RENEW_PERCENT: u64 = 30;
/// Violations listed one by one.
const MAX_LISTED: usize = 20;

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let (holders, stalls) = s.pick((4, 10), (8, 40));
    let title = format!(
        "set stall: {holders} holders of two of {ACCOUNTS} account locks at once (random order, from == to included) SIGSTOPped inside run() past their ttl ({stalls} stalls)"
    );
    let seed = s.seed;
    Scenario::new("15m", title, budget, move |t| run(t, holders, stalls, seed))
}

/// One section as a worker recorded it.
#[derive(Debug)]
struct Record {
    pid: u64,
    start: u64,
    end: u64,
    outcome: String,
    /// The accounts held (one or two) and each one's fencing token.
    held: Vec<(u64, u64)>,
}

impl Record {
    fn parse(line: &str) -> Record {
        let f = fields(line);
        let accounts = f.get("accounts").copied().unwrap_or("");
        let tokens = f.get("tokens").copied().unwrap_or("");
        let held = accounts
            .split(',')
            .zip(tokens.split(','))
            .filter_map(|(a, t)| Some((a.parse().ok()?, t.parse().ok()?)))
            .collect();
        Record {
            pid: field_u64(line, "pid"),
            start: field_u64(line, "start"),
            end: field_u64(line, "end"),
            outcome: f.get("outcome").copied().unwrap_or("?").to_owned(),
            held,
        }
    }

    fn ok(&self) -> bool {
        self.outcome == "ok"
    }

    fn spans(&self, stall: &Stall) -> bool {
        self.pid == stall.pid && self.start < stall.stopped && self.end > stall.resumed
    }

    fn show(&self, base: u64) -> String {
        let at = |us: u64| us.saturating_sub(base) as f64 / 1000.0;
        format!(
            "[pid {} accounts {:?} {:.1}..{:.1} ms]",
            self.pid,
            self.held,
            at(self.start),
            at(self.end)
        )
    }
}

async fn run(t: Arc<Tally>, holders: u64, stalls: u64, seed: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let mut rng = Rng::new(seed);
    let ttl_ms = ms(TTL) as u64;
    let mut workers: Vec<Worker> = (0..holders)
        .map(|i| {
            Worker::spawn(
                format!("multi-{i}"),
                "multi-stall",
                &[
                    ("url", server.url()),
                    ("ttl_ms", ttl_ms.to_string()),
                    ("hold_min_ms", (ttl_ms / 4).to_string()),
                    ("hold_max_ms", (ttl_ms * 3 / 4).to_string()),
                    ("seed", rng.next_u64().to_string()),
                ],
            )
        })
        .collect();
    let pids = start_workers(&mut workers).await;
    let (injected, aimed) = stall_holders(&t, &mut workers, &pids, (&mut rng, stalls, TTL)).await;
    let done = finish_workers(&t, &mut workers).await;
    let sum = |key: &str| done.iter().map(|line| field_u64(line, key)).sum::<u64>();
    let (sections, unentered) = (sum("sections"), sum("unentered"));
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
    let (overlapped, out_of_order) = check_accounts(&t, &records);
    let mut spanned = Vec::new();
    for stall in &injected {
        spanned.extend(records.iter().filter(|r| r.spans(stall)));
    }
    let base = records.first().map_or(0, |r| r.start);
    let spanned_ok: Vec<&&Record> = spanned.iter().filter(|r| r.ok()).collect();
    for r in &spanned_ok {
        t.violation(format!(
            "section {} returned Ok though a stall longer than its {} ms ttl froze it",
            r.show(base),
            ms(TTL)
        ));
    }
    t.check(!spanned.is_empty(), || {
        "no stall hit a critical section: the row proves nothing".to_owned()
    });
    let pairs = records
        .iter()
        .filter(|r| r.ok() && r.held.len() == 2)
        .count();
    t.check(pairs > 0, || {
        "no Ok section held two accounts: the row proves nothing".to_owned()
    });
    let count = |outcome: &str| records.iter().filter(|r| r.outcome == outcome).count();
    t.note(format!(
        "seed {seed}; ttl {} ms; {} sections: ok {} ({pairs} of two accounts, {} of one: from == to), lost {}, error {}",
        ms(TTL),
        records.len(),
        count("ok"),
        count("ok") - pairs,
        count("lost"),
        count("error"),
    ));
    t.note(format!(
        "{} stalls of 1.5-3x ttl ({aimed} aimed at a section entry); {} sections spanned a whole stall: {} returned Ok, {} Lost",
        injected.len(),
        spanned.len(),
        spanned_ok.len(),
        spanned.iter().filter(|r| r.outcome == "lost").count(),
    ));
    t.note(format!(
        "{overlapped} Ok sections overlapped by a later Ok section on a shared account, {out_of_order} tokens not above the account's previous one"
    ));
}

/// Per account: the `Ok` sections holding it are disjoint in time, their tokens rising in
/// start order. Returns the overlaps and the tokens out of order.
fn check_accounts(t: &Tally, records: &[Record]) -> (usize, usize) {
    let base = records.first().map_or(0, |r| r.start);
    let mut by_account: BTreeMap<u64, Vec<(&Record, u64)>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.ok()) {
        for &(account, token) in &r.held {
            by_account.entry(account).or_default().push((r, token));
        }
    }
    let (mut overlapped, mut out_of_order) = (0, 0);
    for (account, held) in &by_account {
        for (i, (r, token)) in held.iter().enumerate() {
            if let Some((later, _)) = held.get(i + 1).filter(|(l, _)| l.start < r.end) {
                overlapped += 1;
                if overlapped <= MAX_LISTED {
                    t.violation(format!(
                        "account {account}: Ok section {} overlaps Ok section {}",
                        r.show(base),
                        later.show(base)
                    ));
                }
            }
            if let Some((later, next)) = held.get(i + 1).filter(|(_, next)| next <= token) {
                out_of_order += 1;
                if out_of_order <= MAX_LISTED {
                    t.violation(format!(
                        "account {account}: token {next} of {} not above {token} of {}",
                        later.show(base),
                        r.show(base)
                    ));
                }
            }
        }
    }
    if overlapped + out_of_order > 2 * MAX_LISTED {
        t.violation(format!(
            "... {overlapped} overlaps and {out_of_order} tokens out of order in all"
        ));
    }
    (overlapped, out_of_order)
}

#[derive(Default)]
struct Entered {
    start: u64,
    tokens: Vec<u64>,
    end: Option<u64>,
}

/// Worker role `multi-stall`: transfers under `lock_all` until told `FINISH`.
pub(crate) async fn worker(mut ctx: Ctx) -> Result<(), String> {
    let url = ctx.param("url").to_owned();
    let ttl = Duration::from_millis(ctx.num("ttl_ms"));
    let (hold_min, hold_max) = (ctx.num("hold_min_ms"), ctx.num("hold_max_ms"));
    let mut rng = Rng::new(ctx.num("seed"));
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
    let (mut sections, mut unentered) = (0u64, 0u64);
    for n in 1.. {
        if let Ok(command) = tokio::time::timeout(Duration::ZERO, ctx.command()).await {
            match command.as_str() {
                "FINISH" => break,
                other => return Err(format!("unexpected command `{other}`")),
            }
        }
        let (from, to) = (rng.below(ACCOUNTS), rng.below(ACCOUNTS));
        let names = match rng.below(2) {
            0 => [format!("account:{from}"), format!("account:{to}")],
            _ => [format!("account:{to}"), format!("account:{from}")],
        };
        let mut accounts = vec![from.min(to), from.max(to)];
        accounts.dedup();
        let renew = rng.percent(RENEW_PERCENT);
        let hold = rng.millis(hold_min, hold_max);
        let entered = Mutex::new(None::<Entered>);
        let body = async {
            let tokens = accounts
                .iter()
                .map(|a| distlock::fencing_token_of(&format!("account:{a}")).unwrap_or(0))
                .collect();
            *lock_unpoisoned(&entered) = Some(Entered {
                start: now_us(),
                tokens,
                end: None,
            });
            ctx.say(format!("IN n={n}"));
            tokio::time::sleep(hold).await;
            if let Some(e) = lock_unpoisoned(&entered).as_mut() {
                e.end = Some(now_us());
            }
        };
        let result = distlock::lock_all(names)
            .ttl(ttl)
            .renew(renew)
            .fenced(true)
            .wait(Duration::from_secs(60))
            .run(body)
            .await;
        let returned = now_us();
        let Some(section) = lock_unpoisoned(&entered).take() else {
            eprintln!("lock call failed before its body ran: {result:?}");
            unentered += 1;
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
        if section.tokens.contains(&0) {
            return Err("a body run under a fenced set saw no token for one of its locks".into());
        }
        let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let record = format!(
            "pid={pid} start={} end={} outcome={outcome} accounts={} tokens={}",
            section.start,
            section.end.unwrap_or(returned),
            join(&accounts),
            join(&section.tokens),
        );
        let _: i64 = conn
            .rpush(RECORDS, record)
            .await
            .map_err(|e| format!("RPUSH record: {e}"))?;
        sections += 1;
    }
    ctx.say(format!("DONE sections={sections} unentered={unentered}"));
    Ok(())
}
