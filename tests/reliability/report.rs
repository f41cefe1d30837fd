//! Runs the scenarios one by one and prints the report table and the closing line; a whole
//! run with `DISTLOCK_WRITE_RELIABILITY=1` also writes it to RELIABILITY.md (`document`).

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bugs::Bug;
use crate::common::{lock_unpoisoned, Settings};
use crate::document::{self, ReportRow, RunInfo};

/// What one scenario counted while it ran; shared with every task of the scenario.
#[derive(Default)]
pub(crate) struct Tally {
    ops: AtomicU64,
    faults: AtomicU64,
    violations: Mutex<Vec<String>>,
    /// Violations caused by a known, reported runtime bug (see `bugs.rs`).
    known: Mutex<Vec<(&'static Bug, String)>>,
    notes: Mutex<Vec<String>>,
}

impl Tally {
    /// Counts `n` lock operations (acquires, releases, probes, critical sections...).
    pub(crate) fn ops(&self, n: u64) {
        self.ops.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` injected faults (kills, pauses, dropped replies, cancellations...).
    pub(crate) fn faults(&self, n: u64) {
        self.faults.fetch_add(n, Ordering::Relaxed);
    }

    /// Records a broken invariant; the scenario fails (the run goes on, to count them all).
    pub(crate) fn violation(&self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("    VIOLATION: {what}");
        lock_unpoisoned(&self.violations).push(what);
    }

    /// Records a violation unless `ok`; returns `ok`.
    pub(crate) fn check(&self, ok: bool, what: impl FnOnce() -> String) -> bool {
        if !ok {
            self.violation(what());
        }
        ok
    }

    /// Records a violation that `bug` (known and reported) explains, unless `ok`. It counts in
    /// the violations column; a row whose only violations are known bugs is XFAIL.
    #[allow(dead_code)] // used while a bug in `bugs.rs` is open
    pub(crate) fn check_known(
        &self,
        bug: &'static Bug,
        ok: bool,
        what: impl FnOnce() -> String,
    ) -> bool {
        if !ok {
            let what = what();
            eprintln!("    VIOLATION (known bug {}): {what}", bug.id);
            lock_unpoisoned(&self.known).push((bug, what));
        }
        ok
    }

    /// A short remark for the table's note column (seed, code path, measured bounds).
    pub(crate) fn note(&self, text: impl Into<String>) {
        lock_unpoisoned(&self.notes).push(text.into());
    }

    fn violation_count(&self) -> usize {
        lock_unpoisoned(&self.violations).len()
    }

    fn known_count(&self) -> usize {
        lock_unpoisoned(&self.known).len()
    }
}

pub(crate) type ScenarioFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One row of the report.
pub(crate) struct Scenario {
    /// Short id (`1a`, `7c`...), also what `--list` prints.
    pub(crate) id: &'static str,
    pub(crate) title: String,
    /// Longest the scenario may run before it is failed as hung.
    pub(crate) budget: Duration,
    pub(crate) run: Box<dyn FnOnce(Arc<Tally>) -> ScenarioFuture>,
}

impl Scenario {
    pub(crate) fn new<F, Fut>(
        id: &'static str,
        title: impl Into<String>,
        budget: Duration,
        run: F,
    ) -> Self
    where
        F: FnOnce(Arc<Tally>) -> Fut + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Scenario {
            id,
            title: title.into(),
            budget,
            run: Box::new(move |tally| Box::pin(run(tally))),
        }
    }

    /// A scenario of `rounds` repetitions: its title ends with `(x<rounds>)`.
    pub(crate) fn repeated<F, Fut>(
        id: &'static str,
        title: &str,
        rounds: u64,
        budget: Duration,
        run: F,
    ) -> Self
    where
        F: FnOnce(Arc<Tally>, u64) -> Fut + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Scenario::new(id, format!("{title} (x{rounds})"), budget, move |t| {
            run(t, rounds)
        })
    }

    /// `filter` is the id (`7`, `7a`) or a word of the title.
    pub(crate) fn matches(&self, filter: &str) -> bool {
        self.id == filter
            || (self.id.starts_with(filter)
                && self.id[filter.len()..]
                    .chars()
                    .all(|c| c.is_ascii_alphabetic()))
            || (filter.len() > 2 && self.title.contains(filter))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    /// Every violation is explained by a known, reported runtime bug (expected-fail).
    ExpectedFail,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::ExpectedFail => "XFAIL",
        }
    }

    fn counts_as_failure(self) -> bool {
        self == Verdict::Fail
    }
}

struct Row {
    id: &'static str,
    title: String,
    ops: u64,
    faults: u64,
    violations: usize,
    verdict: Verdict,
    secs: f64,
    notes: Vec<String>,
    problems: Vec<String>,
    bugs: Vec<&'static Bug>,
}

/// Runs each scenario on a fresh runtime, then prints the table and `N passed, M failed`.
/// With `DISTLOCK_WRITE_RELIABILITY=1` a `whole` run (every scenario, no filter) also writes
/// RELIABILITY.md; nothing else writes a file (CI does not set it).
pub(crate) fn run_all(settings: &Settings, scenarios: Vec<Scenario>, whole: bool) -> ExitCode {
    let write = std::env::var("DISTLOCK_WRITE_RELIABILITY").is_ok_and(|v| v == "1");
    println!(
        "distlock reliability suite: {} scenario(s), {} profile, seed {}",
        scenarios.len(),
        if settings.heavy { "heavy" } else { "CI" },
        settings.seed
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    for scenario in scenarios {
        println!("--- {} {}", scenario.id, scenario.title);
        let row = run_one(scenario);
        println!("    {} in {:.1}s", row.verdict.label(), row.secs);
        rows.push(row);
    }
    print_table(&rows);
    let failed = rows
        .iter()
        .filter(|r| r.verdict.counts_as_failure())
        .count();
    let passed = rows.len() - failed;
    let total_secs = started.elapsed().as_secs_f64();
    println!("total {total_secs:.1}s");
    println!("{passed} passed, {failed} failed");
    let mut written = true;
    if write && !whole {
        eprintln!("DISTLOCK_WRITE_RELIABILITY: a filtered run does not write RELIABILITY.md");
    } else if write {
        match write_document(settings, &rows, total_secs, passed, failed) {
            Ok(path) => eprintln!("wrote {path}"),
            Err(e) => {
                eprintln!("could not write RELIABILITY.md: {e}");
                written = false;
            }
        }
    }
    if failed == 0 && written {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_one(scenario: Scenario) -> Row {
    let tally = Arc::new(Tally::default());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let budget = scenario.budget;
    let future = (scenario.run)(tally.clone());
    let outcome = runtime.block_on(async move {
        let task = tokio::spawn(future);
        tokio::time::timeout(budget, task).await
    });
    let secs = started.elapsed().as_secs_f64();
    // Whatever a failed scenario left running (a hung acquire, a proxy) dies with its runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));

    let mut problems = Vec::new();
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(join)) => problems.push(match join.try_into_panic() {
            Ok(payload) => format!("panicked: {}", panic_message(payload.as_ref())),
            Err(join) => format!("task failed: {join}"),
        }),
        Err(_) => problems.push(format!("did not finish within its budget of {budget:?}")),
    }
    let (unexpected, known) = (tally.violation_count(), tally.known_count());
    let verdict = if unexpected > 0 || !problems.is_empty() {
        Verdict::Fail
    } else if known > 0 {
        Verdict::ExpectedFail
    } else {
        Verdict::Pass
    };
    let violations = unexpected + known;
    let notes = lock_unpoisoned(&tally.notes).clone();
    problems.extend(lock_unpoisoned(&tally.violations).iter().cloned());
    let mut bugs: Vec<&'static Bug> = Vec::new();
    for (bug, what) in lock_unpoisoned(&tally.known).iter() {
        problems.push(format!("known bug {}: {what}", bug.id));
        if !bugs.iter().any(|b| b.id == bug.id) {
            bugs.push(bug);
        }
    }
    Row {
        id: scenario.id,
        title: scenario.title,
        ops: tally.ops.load(Ordering::Relaxed),
        faults: tally.faults.load(Ordering::Relaxed),
        violations,
        verdict,
        secs,
        notes,
        problems,
        bugs,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

/// The report's lines for `rows`, in the form `document` renders.
fn report_rows(rows: &[Row]) -> Vec<ReportRow> {
    rows.iter()
        .map(|r| ReportRow {
            id: r.id.to_owned(),
            title: r.title.clone(),
            ops: r.ops,
            faults: r.faults,
            violations: r.violations,
            result: r.verdict.label(),
            secs: r.secs,
            notes: r.notes.clone(),
            problems: r.problems.clone(),
        })
        .collect()
}

/// The known bugs behind the XFAIL rows, each once.
fn known_bugs(rows: &[Row]) -> Vec<&'static Bug> {
    let mut bugs: Vec<&'static Bug> = Vec::new();
    for bug in rows.iter().flat_map(|r| r.bugs.iter()) {
        if !bugs.iter().any(|b| b.id == bug.id) {
            bugs.push(bug);
        }
    }
    bugs
}

fn print_table(rows: &[Row]) {
    println!();
    print!("{}", document::table(&report_rows(rows)));
    let bugs = known_bugs(rows);
    if !bugs.is_empty() {
        println!();
        println!("XFAIL rows are explained by these known runtime bugs (reported, not yet fixed):");
        for bug in bugs {
            println!("  {}: {}", bug.id, bug.title);
        }
    }
    println!();
    for r in rows {
        if r.notes.is_empty() && r.problems.is_empty() {
            continue;
        }
        println!("{} {}:", r.id, r.title);
        for note in &r.notes {
            println!("    note: {note}");
        }
        for problem in &r.problems {
            println!("    problem: {problem}");
        }
    }
    println!();
}

/// Writes RELIABILITY.md from a whole run's `rows`: the generated part above
/// [`document::KEPT_MARKER`], the file's hand-written part from it on kept as it was.
fn write_document(
    settings: &Settings,
    rows: &[Row],
    total_secs: f64,
    passed: usize,
    failed: usize,
) -> std::io::Result<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let run = RunInfo {
        date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"], root),
        commit: command_output("git", &["describe", "--always", "--dirty"], root),
        profile: if settings.heavy { "heavy" } else { "CI" },
        seed: settings.seed,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        total_secs,
        passed,
        failed,
    };
    let bugs: Vec<(&str, &str)> = known_bugs(rows).iter().map(|b| (b.id, b.title)).collect();
    let text = document::generated(&run, &report_rows(rows), &bugs);
    let path = format!("{root}/RELIABILITY.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(
        &path,
        testkit::with_kept_part(&text, &old, document::KEPT_MARKER),
    )?;
    Ok(path)
}

/// The first line `program args` prints in `dir`, or `unknown`.
fn command_output(program: &str, args: &[&str], dir: &str) -> String {
    std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}
