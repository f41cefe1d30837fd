//! S1/S2: a semaphore's permits and a shared (read) hold, run by B1's and B3's machinery
//! (`Runner::cycles`, `Runner::handoffs`) against the raw floor of the same hold and a
//! Redisson-style expirable semaphore (`semaphores`).
//!
//! * S1 is B1 for other holds: one task, acquire + release in a loop, of a permit of a
//!   semaphore of [`PERMITS`], of a read hold, and of the lock (for reference, same run);
//! * S2 is B3 for permits: [`S2_TASKS`] tasks on one semaphore of [`PERMITS`], each waiting for
//!   a permit, in a loop. The handoff gap is from a release returning to the next waiter's
//!   section starting (`Runner::handoffs`); overlaps count more than [`PERMITS`] inside at once.
//!
//! Holds and contenders alternate within each repetition (the first one rotates); the ratio
//! columns are medians of per-repetition ratios.

use std::collections::HashMap;
use std::fmt::Write;

use crate::contenders::{BenchResult, Hold, Kind};
use crate::plan::Plan;
use crate::scenarios::Runner;
use crate::stats::{fmt_num, median, CycleRow, HandoffRow};

/// The semaphore's count in S1 and S2.
pub(crate) const PERMITS: u32 = 2;
/// Tasks waiting for [`PERMITS`] permits in S2.
pub(crate) const S2_TASKS: usize = 8;

/// S1's rows, in table order.
const S1_ROWS: [(Hold, Kind); 9] = [
    (Hold::Permits(PERMITS), Kind::Floor),
    (Hold::Permits(PERMITS), Kind::Redisson),
    (Hold::Permits(PERMITS), Kind::Manual),
    (Hold::Permits(PERMITS), Kind::ManualRun),
    (Hold::Read, Kind::Floor),
    (Hold::Read, Kind::Manual),
    (Hold::Read, Kind::ManualRun),
    (Hold::Lock, Kind::Floor),
    (Hold::Lock, Kind::Manual),
];

/// S2's contenders, in table order.
const S2_KINDS: [Kind; 4] = [Kind::Floor, Kind::Redisson, Kind::Manual, Kind::ManualRun];

/// Everything S1 and S2 measured.
#[derive(Default)]
pub(crate) struct Holds {
    /// Per row: every repetition's [`CycleRow`], in run order.
    s1: Vec<((Hold, Kind), Vec<CycleRow>)>,
    /// Per contender: every repetition's [`HandoffRow`], and the overlaps summed.
    s2: Vec<(Kind, Vec<HandoffRow>, u64)>,
}

pub(crate) fn hold_label(hold: Hold) -> String {
    match hold {
        Hold::Lock => "lock".to_owned(),
        Hold::Permits(n) => format!("permit (of {n})"),
        Hold::Read => "read hold".to_owned(),
        Hold::Fenced => "lock, fenced".to_owned(),
        Hold::Set => "set of 2 locks".to_owned(),
    }
}

fn kind_label(kind: Kind) -> &'static str {
    match kind {
        Kind::Floor => "floor (raw d2 protocol)",
        Kind::Redisson => "Redisson-style semaphore (hand-written)",
        other => other.label(),
    }
}

/// The key-name tag of a hold.
pub(crate) fn hold_tag(hold: Hold) -> &'static str {
    match hold {
        Hold::Lock => "lock",
        Hold::Permits(_) => "permits",
        Hold::Read => "read",
        Hold::Fenced => "fenced",
        Hold::Set => "set",
    }
}

/// The rows of `rows` in the order of repetition `rep` (rotated so none always goes first).
fn rotated<T: Copy>(rows: &[T], rep: usize) -> Vec<T> {
    let mut v = rows.to_vec();
    v.rotate_left(rep % rows.len());
    v
}

/// Runs S1 and/or S2 (as `plan` selects).
pub(crate) async fn run(
    plan: &Plan,
    runner: &mut Runner,
    admin: &mut redis::aio::MultiplexedConnection,
) -> BenchResult<Holds> {
    let mut holds = Holds::default();
    if plan.runs("S1") {
        redis::cmd("FLUSHALL").exec_async(admin).await?;
        let mut runs: HashMap<(Hold, Kind), Vec<CycleRow>> = HashMap::new();
        for rep in 0..plan.reps {
            for (hold, kind) in rotated(&S1_ROWS, rep) {
                let scenario = format!("s1-{}", hold_tag(hold));
                let row = runner.cycles(kind, &scenario, 1, hold).await?.row();
                eprintln!(
                    "S1 rep {rep} {:<12} {:<40} {:>9.0} cycles/s  p50 {:>6.1} µs",
                    hold_label(hold),
                    kind_label(kind),
                    row[0],
                    row[1]
                );
                runs.entry((hold, kind)).or_default().push(row);
            }
        }
        holds.s1 = S1_ROWS
            .iter()
            .map(|row| (*row, runs.remove(row).unwrap_or_default()))
            .collect();
    }
    if plan.runs("S2") {
        redis::cmd("FLUSHALL").exec_async(admin).await?;
        let hold = Hold::Permits(PERMITS);
        let mut runs: HashMap<Kind, (Vec<HandoffRow>, u64)> = HashMap::new();
        for rep in 0..plan.reps {
            for kind in rotated(&S2_KINDS, rep) {
                let mut r = runner
                    .handoffs(kind, &format!("s2-{rep}"), S2_TASKS, hold)
                    .await?;
                let row = r.row();
                eprintln!(
                    "S2 {S2_TASKS} tasks, {PERMITS} permits, rep {rep} {:<40} {:>8.0} sections/s  gap p50 {:>7.1} µs  p99 {:>8.1} µs",
                    kind_label(kind),
                    row[0],
                    row[1],
                    row[2]
                );
                let entry = runs.entry(kind).or_default();
                entry.0.push(row);
                entry.1 += r.violations;
            }
        }
        holds.s2 = S2_KINDS
            .iter()
            .map(|k| {
                let (rows, overlaps) = runs.remove(k).unwrap_or_default();
                (*k, rows, overlaps)
            })
            .collect();
    }
    Ok(holds)
}

/// Column-wise medians of per-repetition rows.
pub(crate) fn median_cols<const N: usize>(rows: &[[f64; N]]) -> [f64; N] {
    std::array::from_fn(|i| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>()))
}

/// Median of the per-repetition ratios of the first column (throughput), `a` over `b`.
fn ratio<const N: usize>(a: &[[f64; N]], b: Option<&Vec<[f64; N]>>) -> f64 {
    b.map_or(f64::NAN, |b| {
        median(
            &a.iter()
                .zip(b)
                .map(|(a, b)| a[0] / b[0])
                .collect::<Vec<_>>(),
        )
    })
}

/// Smallest and largest per-repetition throughput.
fn spread<const N: usize>(rows: &[[f64; N]]) -> String {
    let lo = rows.iter().map(|r| r[0]).fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|r| r[0]).fold(f64::NEG_INFINITY, f64::max);
    format!("{}–{}", fmt_num(lo), fmt_num(hi))
}

/// A ratio for a table, or a dash where it does not apply.
fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}")
    } else {
        "–".to_owned()
    }
}

/// The S1 and S2 tables; returns S2's overlaps (more than [`PERMITS`] inside at once), if S2
/// ran.
pub(crate) fn render(holds: &Holds, out: &mut String) -> Option<u64> {
    if !holds.s1.is_empty() {
        let _ = writeln!(
            out,
            "## S1 — uncontended permit and read hold: acquire + release (1 task)\n\n\
             A permit of a semaphore of {PERMITS} (`distlock::semaphore(name, {PERMITS})`), a \
             read hold (`distlock::lock(name).read()`) and the lock, each in the same run. \
             *× floor* is against the floor of the same hold: redis-rs sending distlock's own \
             `ACQUIRE_PERMIT` / `ACQUIRE_READ` (or, for the lock, the pipelined `SET NX PX GET`) \
             and `RELEASE` by EVALSHA with precomputed keys. *× Redisson-style* is against a \
             hand-written expirable semaphore after Redisson's `RPermitExpirableSemaphore` \
             (a free-permit counter and a sorted set of permit expiries; the acquire returns \
             expired permits first; the release publishes the free count; written with \
             redis-rs alone, no fencing, client clocks). Range = slowest–fastest repetition.\n"
        );
        let _ = writeln!(
            out,
            "| hold | implementation | cycles/s | range | × floor | × Redisson-style | p50 µs | p99 µs | Redis cmds/cycle | Redis CPU µs/cycle | client CPU µs/cycle |\n| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        let find = |hold: Hold, kind: Kind| {
            holds
                .s1
                .iter()
                .find(|(row, _)| *row == (hold, kind))
                .map(|(_, runs)| runs)
        };
        for ((hold, kind), runs) in &holds.s1 {
            if runs.is_empty() {
                continue;
            }
            let [per_sec, p50, p99, cpu, calls, client] = median_cols(runs);
            let redisson = match hold {
                Hold::Permits(_) => ratio(runs, find(*hold, Kind::Redisson)),
                _ => f64::NAN,
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                hold_label(*hold),
                kind_label(*kind),
                fmt_num(per_sec),
                spread(runs),
                fmt_ratio(ratio(runs, find(*hold, Kind::Floor))),
                fmt_ratio(redisson),
                p50,
                p99,
                calls,
                cpu,
                client
            );
        }
        let _ = writeln!(out);
    }
    if holds.s2.is_empty() {
        return None;
    }
    let _ = writeln!(
        out,
        "## S2 — contended permits ({S2_TASKS} tasks, one semaphore of {PERMITS}, waiting)\n\n\
         Gap = a release returned → the next waiter's section started: with at most {PERMITS} \
         holders inside, the i-th section to start took the permit of the (i − {PERMITS})-th \
         release (B3's measure for n = 1). Share and Jain as in B3. Overlaps = sections that \
         started while {PERMITS} were already inside (must be 0). The floor spins on \
         `ACQUIRE_PERMIT`; the Redisson-style semaphore waits as Redisson does (a subscription \
         per name; a waiter tries, then waits for a release's message or the first permit's \
         expiry, then tries again); distlock waits with `.wait(60 s)`.\n"
    );
    let _ = writeln!(
        out,
        "| implementation | sections/s | range | × floor | × Redisson-style | gap p50 µs | gap p99 µs | share min–max | Jain | Redis cmds/section | Redis CPU µs/section | client CPU µs/section | overlaps |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    let find = |kind: Kind| {
        holds
            .s2
            .iter()
            .find(|(k, _, _)| *k == kind)
            .map(|(_, r, _)| r)
    };
    let mut overlaps = 0;
    for (kind, runs, violations) in &holds.s2 {
        overlaps += violations;
        if runs.is_empty() {
            continue;
        }
        let [per_sec, p50, p99, min_share, max_share, jain, cpu, calls, client] = median_cols(runs);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.2}–{:.2} | {:.3} | {:.1} | {:.1} | {:.1} | {} |",
            kind_label(*kind),
            fmt_num(per_sec),
            spread(runs),
            fmt_ratio(ratio(runs, find(Kind::Floor))),
            fmt_ratio(ratio(runs, find(Kind::Redisson))),
            p50,
            p99,
            min_share,
            max_share,
            jain,
            calls,
            cpu,
            client,
            violations
        );
    }
    let _ = writeln!(out);
    Some(overlaps)
}
