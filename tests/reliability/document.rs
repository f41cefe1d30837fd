//! The report as Markdown: the table printed after every run, and RELIABILITY.md, which a whole
//! run writes when `DISTLOCK_WRITE_RELIABILITY=1` is set (the table, the run it comes from and
//! its notes above [`KEPT_MARKER`]; the hand-written part from the marker on is kept as it was).
//!
//! Pure text, no I/O: `tests/reliability_document.rs` includes this file and tests it (the
//! suite has a harness of its own, which runs no `#[test]`).

use std::fmt::Write as _;

/// The line after which RELIABILITY.md holds what a run does not write (the findings of single
/// rows, written by hand): a run rewrites everything above it and keeps everything from it on.
pub(crate) const KEPT_MARKER: &str =
    "<!-- Written by hand: kept as is by `DISTLOCK_WRITE_RELIABILITY=1 cargo test --test reliability`. -->";

/// One scenario's line of the report.
pub(crate) struct ReportRow {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) ops: u64,
    pub(crate) faults: u64,
    pub(crate) violations: usize,
    /// `PASS`, `FAIL` or `XFAIL`.
    pub(crate) result: &'static str,
    pub(crate) secs: f64,
    pub(crate) notes: Vec<String>,
    pub(crate) problems: Vec<String>,
}

/// What RELIABILITY.md says about the run its table comes from.
pub(crate) struct RunInfo {
    /// When it ended, as `date -u` wrote it.
    pub(crate) date: String,
    /// The commit it ran at (`git describe --always --dirty`).
    pub(crate) commit: String,
    /// `CI` or `heavy` (`RELIABILITY_HEAVY=1`).
    pub(crate) profile: &'static str,
    pub(crate) seed: u64,
    /// Logical CPUs of the machine.
    pub(crate) cpus: usize,
    pub(crate) total_secs: f64,
    pub(crate) passed: usize,
    pub(crate) failed: usize,
}

/// The report table: one line per scenario, as Markdown.
pub(crate) fn table(rows: &[ReportRow]) -> String {
    let width = rows
        .iter()
        .map(|r| r.title.chars().count())
        .max()
        .unwrap_or(8)
        .max(8);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| {:<3} | {:<width$} | {:>10} | {:>15} | {:>20} | {:<6} | {:>6} |",
        "#", "scenario", "operations", "faults injected", "invariant violations", "result", "time"
    );
    let _ = writeln!(
        out,
        "|{}|{}|{}:|{}:|{}:|{}|{}:|",
        "-".repeat(5),
        "-".repeat(width + 2),
        "-".repeat(11),
        "-".repeat(16),
        "-".repeat(21),
        "-".repeat(8),
        "-".repeat(7)
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {:<3} | {:<width$} | {:>10} | {:>15} | {:>20} | {:<6} | {:>5.1}s |",
            r.id,
            escape(&r.title),
            r.ops,
            r.faults,
            r.violations,
            r.result,
            r.secs
        );
    }
    out
}

/// The part of RELIABILITY.md a run writes: a header naming the run, its table, the known bugs
/// behind XFAIL rows (`(id, title)`), and each row's notes and problems.
pub(crate) fn generated(run: &RunInfo, rows: &[ReportRow], bugs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    out.push_str("# distlock reliability report\n\n");
    out.push_str(
        "Regenerate: `DISTLOCK_WRITE_RELIABILITY=1 cargo test --test reliability` (every scenario; \
         `RELIABILITY_HEAVY=1` for the heavy profile). A whole run rewrites this file down to the \
         marker below and keeps the hand-written part after it; a run of some scenarios only \
         (a filter) writes nothing. The suite starts its own `redis-server` processes; see \
         `tests/reliability/main.rs`.\n\n",
    );
    out.push_str("| | |\n| --- | --- |\n");
    let _ = writeln!(out, "| run | {} |", run.date);
    let _ = writeln!(out, "| commit | `{}` |", run.commit);
    let _ = writeln!(
        out,
        "| profile | {} (seed {}: `RELIABILITY_SEED={}` replays its random choices) |",
        run.profile, run.seed, run.seed
    );
    let _ = writeln!(out, "| machine | {} logical CPUs |", run.cpus);
    let _ = writeln!(
        out,
        "| outcome | {} passed, {} failed, in {:.1} s |",
        run.passed, run.failed, run.total_secs
    );
    out.push_str(
        "\n*operations* counts lock operations (acquires, releases, probes, critical sections), \
         *faults injected* the kills, pauses, dropped replies and cancellations, *invariant \
         violations* every broken promise the scenario checks (a row passes with none; XFAIL: \
         each is a known, reported bug).\n\n",
    );
    out.push_str(&table(rows));
    if !bugs.is_empty() {
        out.push_str(
            "\nXFAIL rows are explained by these known runtime bugs (reported, not yet fixed):\n\n",
        );
        for (id, title) in bugs {
            let _ = writeln!(out, "- {id}: {}", escape(title));
        }
    }
    let noted: Vec<&ReportRow> = rows
        .iter()
        .filter(|r| !r.notes.is_empty() || !r.problems.is_empty())
        .collect();
    if !noted.is_empty() {
        out.push_str("\n## Notes of the run\n\n");
        for r in noted {
            let _ = writeln!(out, "- **{}** {}", r.id, escape(&r.title));
            for note in &r.notes {
                let _ = writeln!(out, "  - {}", escape(note));
            }
            for problem in &r.problems {
                let _ = writeln!(out, "  - problem: {}", escape(problem));
            }
        }
    }
    out
}

/// Text for a table cell or a list item: a `|` would end the cell, a line break the row.
fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
