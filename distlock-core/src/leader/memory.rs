//! The highest term this process has seen of each election: its own terms, and every term read
//! by [`current`](super::LeaderBuilder::current) and by observers.
//!
//! Each proclaim passes it as `known`, and a new term is above it. Terms are the server's
//! clock (µs) or above the last term recorded, so they rise on their own while the record or
//! the fence floor lives, or while the server's clock never goes back; this memory keeps them
//! rising where both are gone at once: no leader for longer than the retention (or the keys
//! deleted by hand) *and* a server clock stepped back, as long as one process that saw the last
//! term campaigns or observes.
//!
//! Keyed by the client's key prefix and the name: two deployments in one process under the same
//! prefix and name share it, which only ever moves one's terms up (still rising, still unique).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::sync;

fn seen() -> &'static Mutex<HashMap<(String, String), u64>> {
    static SEEN: OnceLock<Mutex<HashMap<(String, String), u64>>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

/// The highest term of `name` (under `prefix`) this process has seen; 0 for none.
pub(super) fn known(prefix: &str, name: &str) -> u64 {
    let seen = sync::lock(seen());
    seen.get(&(prefix.to_owned(), name.to_owned()))
        .copied()
        .unwrap_or(0)
}

/// Remembers `term` of `name` (under `prefix`), if above what was known.
pub(super) fn saw(prefix: &str, name: &str, term: u64) {
    let mut seen = sync::lock(seen());
    let known = seen
        .entry((prefix.to_owned(), name.to_owned()))
        .or_insert(0);
    *known = (*known).max(term);
}
