//! A generated report written over a file that keeps a hand-written part: everything above a
//! marker line is the report's, everything from the marker on is kept as it was
//! (BENCHMARKS.md from `cargo bench --bench locks`, RELIABILITY.md from the reliability suite).

/// `generated` followed by the part of `old` from `marker` on; `old` without the marker (a new
/// file) gets the marker alone, so that the next run finds where the kept part starts.
pub fn with_kept_part(generated: &str, old: &str, marker: &str) -> String {
    match old.find(marker) {
        Some(at) => format!("{}\n\n{}", generated.trim_end(), &old[at..]),
        None => format!("{}\n\n{marker}\n", generated.trim_end()),
    }
}
