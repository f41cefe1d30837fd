//! The reliability suite's report as Markdown (`tests/reliability/document.rs`: the table it
//! prints and the RELIABILITY.md a whole run writes with `DISTLOCK_WRITE_RELIABILITY=1`). The
//! suite has a harness of its own, which runs no `#[test]`, so its formatting is tested here.

#[path = "reliability/document.rs"]
mod document;

use document::{generated, table, ReportRow, RunInfo, KEPT_MARKER};

/// The suite's own use of `testkit::with_kept_part`: RELIABILITY.md's marker.
fn with_kept_part(generated: &str, old: &str) -> String {
    testkit::with_kept_part(generated, old, KEPT_MARKER)
}

fn row(id: &str, title: &str, result: &'static str) -> ReportRow {
    ReportRow {
        id: id.to_owned(),
        title: title.to_owned(),
        ops: 60,
        faults: 10,
        violations: 0,
        result,
        secs: 12.34,
        notes: Vec::new(),
        problems: Vec::new(),
    }
}

fn run() -> RunInfo {
    RunInfo {
        date: "2026-11-27 15:00 UTC".to_owned(),
        commit: "b0f3780".to_owned(),
        profile: "CI",
        seed: 42,
        cpus: 2,
        total_secs: 600.0,
        passed: 2,
        failed: 0,
    }
}

#[test]
fn the_table_has_a_line_per_row_with_its_figures() {
    let text = table(&[
        row("15", "lease stall", "PASS"),
        row("15p", "permit | stall", "XFAIL"),
    ]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("| #   | scenario"), "{text}");
    assert!(lines[1].starts_with("|-----|"), "{text}");
    assert!(
        lines[1].ends_with("-------:|"),
        "right-aligned time: {text}"
    );
    assert!(lines[2].starts_with("| 15  | lease stall"), "{text}");
    assert!(lines[2].ends_with("| PASS   |  12.3s |"), "{text}");
    // A `|` in a title stays inside its cell.
    assert!(lines[3].contains("permit \\| stall"), "{text}");
    // Every line has the same number of cells.
    let cells = |l: &str| l.replace("\\|", "").matches('|').count();
    assert!(lines.iter().all(|l| cells(l) == 8), "{text}");
}

#[test]
fn the_generated_part_names_its_run_and_lists_notes() {
    let mut noted = row("16", "sentinel failover", "PASS");
    noted.notes.push("1,567 `Ok` sections".to_owned());
    noted.problems.push("late\nreply".to_owned());
    let text = generated(
        &run(),
        &[row("15", "lease stall", "PASS"), noted],
        &[("B1", "a bug")],
    );
    assert!(
        text.starts_with("# distlock reliability report\n"),
        "{text}"
    );
    assert!(
        text.contains("DISTLOCK_WRITE_RELIABILITY=1 cargo test --test reliability"),
        "{text}"
    );
    assert!(text.contains("| commit | `b0f3780` |"), "{text}");
    assert!(text.contains("| run | 2026-11-27 15:00 UTC |"), "{text}");
    assert!(text.contains("RELIABILITY_SEED=42"), "{text}");
    assert!(
        text.contains("| outcome | 2 passed, 0 failed, in 600.0 s |"),
        "{text}"
    );
    assert!(text.contains("| 15  | lease stall"), "{text}");
    assert!(text.contains("- B1: a bug"), "{text}");
    assert!(
        text.contains(
            "- **16** sentinel failover\n  - 1,567 `Ok` sections\n  - problem: late reply\n"
        ),
        "{text}"
    );
    assert!(
        !text.contains("**15**"),
        "a row without notes is not listed: {text}"
    );
}

#[test]
fn a_run_keeps_the_hand_written_part() {
    let old = format!(
        "# old report\n\n| old | table |\n\n{KEPT_MARKER}\n\n## Row 20 by hand\n\nfigures\n"
    );
    let new = with_kept_part("# new report\n\n| new | table |\n", &old);
    assert_eq!(
        new,
        format!(
            "# new report\n\n| new | table |\n\n{KEPT_MARKER}\n\n## Row 20 by hand\n\nfigures\n"
        )
    );
    // Written again, nothing changes.
    assert_eq!(
        with_kept_part("# new report\n\n| new | table |\n", &new),
        new
    );
    // A file without the marker (or none) gets one, so the next run keeps what follows it.
    assert_eq!(
        with_kept_part("# new\n", ""),
        format!("# new\n\n{KEPT_MARKER}\n")
    );
}
