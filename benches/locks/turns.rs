//! S3: every waiter in its turn, per kind of hold (issue 28, item 3). [`S3_TASKS`] tasks of one
//! client wait for one hold of each kind in turn, in a loop, with distlock's manual API (`wait`,
//! `acquire`, an empty section, `release().await`): the lock, the lock `fenced`, a permit of a
//! semaphore of one, and a set of two locks. B3's machinery (`Runner::handoffs`): the gap is a
//! release returned → the next waiter's section started; Jain over the tasks' sections;
//! overlaps count more than one inside at once. No peer has these holds waiting in turn, so
//! the rows are distlock's own, each kind against the plain lock of the same run.

use std::fmt::Write;

use crate::contenders::{BenchResult, Hold, Kind};
use crate::holds::{hold_label, hold_tag, median_cols};
use crate::plan::Plan;
use crate::scenarios::Runner;
use crate::stats::{fmt_num, HandoffRow};

/// Tasks waiting for one hold in S3.
pub(crate) const S3_TASKS: usize = 8;

/// S3's holds, in table order.
const S3_HOLDS: [Hold; 4] = [Hold::Lock, Hold::Fenced, Hold::Permits(1), Hold::Set];

/// What S3 measured: per hold, every repetition's row and the overlaps summed.
pub(crate) type Turns = Vec<(Hold, Vec<HandoffRow>, u64)>;

/// Runs S3 (if `plan` selects it).
pub(crate) async fn run(
    plan: &Plan,
    runner: &mut Runner,
    admin: &mut redis::aio::MultiplexedConnection,
) -> BenchResult<Turns> {
    let mut turns: Turns = S3_HOLDS.iter().map(|&h| (h, Vec::new(), 0)).collect();
    if !plan.runs("S3") {
        return Ok(Vec::new());
    }
    redis::cmd("FLUSHALL").exec_async(admin).await?;
    for rep in 0..plan.reps {
        let mut order = S3_HOLDS.to_vec();
        order.rotate_left(rep % S3_HOLDS.len());
        for hold in order {
            let scenario = format!("s3-{}-{rep}", hold_tag(hold));
            let mut r = runner
                .handoffs(Kind::Manual, &scenario, S3_TASKS, hold)
                .await?;
            let row = r.row();
            eprintln!(
                "S3 {S3_TASKS} tasks, rep {rep} {:<16} {:>8.0} sections/s  gap p50 {:>7.1} µs  p99 {:>8.1} µs  Jain {:.3}",
                hold_label(hold),
                row[0],
                row[1],
                row[2],
                row[5]
            );
            if let Some(entry) = turns.iter_mut().find(|(h, _, _)| *h == hold) {
                entry.1.push(row);
                entry.2 += r.violations;
            }
        }
    }
    Ok(turns)
}

/// The S3 table; returns the overlaps and the worst gap p99 in µs, if S3 ran.
pub(crate) fn render(turns: &Turns, out: &mut String) -> Option<(u64, f64)> {
    if turns.is_empty() {
        return None;
    }
    let _ = writeln!(
        out,
        "## S3 — every waiter in its turn, per kind of hold ({S3_TASKS} tasks, one hold, distlock manual)\n\n\
         Each kind's waiters queue in Redis and a release hands the hold to the first of them \
         (a fenced waiter and a set's waiter confirm the grant with one more round trip: its \
         token, the set's other lock). Gap, share and Jain as in B3; overlaps = sections that \
         started while another was inside (must be 0).\n"
    );
    let _ = writeln!(
        out,
        "| hold | sections/s | × the lock | gap p50 µs | gap p99 µs | share min–max | Jain | Redis cmds/section | Redis CPU µs/section | client CPU µs/section | overlaps |\n| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    let lock = turns
        .iter()
        .find(|(h, _, _)| *h == Hold::Lock)
        .map(|(_, rows, _)| median_cols(rows)[0]);
    let (mut overlaps, mut worst) = (0, 0f64);
    for (hold, rows, violations) in turns {
        overlaps += violations;
        if rows.is_empty() {
            continue;
        }
        let [per_sec, p50, p99, min_share, max_share, jain, cpu, calls, client] = median_cols(rows);
        worst = worst.max(p99);
        let vs_lock = lock.map_or("–".to_owned(), |l| format!("{:.2}", per_sec / l));
        let _ = writeln!(
            out,
            "| {} | {} | {vs_lock} | {p50:.1} | {p99:.1} | {min_share:.2}–{max_share:.2} | {jain:.3} | {calls:.1} | {cpu:.1} | {client:.1} | {violations} |",
            hold_label(*hold),
            fmt_num(per_sec),
        );
    }
    let _ = writeln!(out);
    Some((overlaps, worst))
}
