//! distlock's fault and concurrency suite: a custom harness (`harness = false`).
//!
//! `cargo test --test reliability` runs every scenario against throwaway `redis-server`
//! processes (and, for the multi-process scenarios, copies of this binary started as workers),
//! prints one row per scenario (operations, faults injected, invariant violations, result), and
//! ends with `N passed, M failed`; the exit code is non-zero if any scenario failed.
//!
//! * `cargo test --test reliability -- <filter>` runs the scenarios whose id or title contains
//!   `<filter>`; `-- --list` lists them.
//! * `RELIABILITY_HEAVY=1` runs the heavier variants (more processes, iterations, rounds).
//! * `RELIABILITY_SEED=<u64>` replays the random choices of a previous run (each row that uses
//!   randomness prints its seed).
//! * `DISTLOCK_WRITE_RELIABILITY=1` writes the report of a whole run (no filter) to
//!   RELIABILITY.md, above its hand-written part, which it keeps (`document.rs`). Without it
//!   (as in CI) the run writes no file.
//!
//! A worker process is this binary with `DISTLOCK_RELIABILITY_WORKER=<role>` in its environment
//! (see `worker.rs`); it talks to the suite through stdin/stdout lines.

mod bugs;
mod common;
mod document;
mod report;
mod scenarios;
mod worker;

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(role) = worker::role_from_env() {
        return worker::run(&role, |role, ctx| async move {
            scenarios::worker_role(&role, ctx).await
        });
    }
    let mut filters = Vec::new();
    let mut list = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--list" => list = true,
            // Flags cargo or CI may pass to a test binary; they mean nothing here.
            flag if flag.starts_with('-') => {}
            text => filters.push(text.to_owned()),
        }
    }
    // One line per panic (the report repeats it), not a backtrace per scenario.
    std::panic::set_hook(Box::new(|info| eprintln!("    panic: {info}")));
    let settings = common::Settings::from_env();
    let selected: Vec<_> = scenarios::all(&settings)
        .into_iter()
        .filter(|s| filters.is_empty() || filters.iter().any(|f| s.matches(f)))
        .collect();
    if list {
        for s in &selected {
            println!("{}: test", s.id);
        }
        return ExitCode::SUCCESS;
    }
    report::run_all(&settings, selected, filters.is_empty())
}
