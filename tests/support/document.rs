//! A generated report written over a file that keeps a hand-written part: everything above a
//! marker line is the report's, everything from the marker on is kept as it was
//! (BENCHMARKS.md from `cargo bench --bench locks`, RELIABILITY.md from the reliability suite);
//! and the anchor a Markdown heading gets, for tests of the links between documents.

/// `generated` followed by the part of `old` from `marker` on; `old` without the marker (a new
/// file) gets the marker alone, so that the next run finds where the kept part starts.
pub fn with_kept_part(generated: &str, old: &str, marker: &str) -> String {
    match old.find(marker) {
        Some(at) => format!("{}\n\n{}", generated.trim_end(), &old[at..]),
        None => format!("{}\n\n{marker}\n", generated.trim_end()),
    }
}

/// A heading's anchor as GitHub (and GitLab) make it: lower case, spaces as dashes, other
/// punctuation dropped.
pub fn markdown_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
