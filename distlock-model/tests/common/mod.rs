//! What the model's tests share: the configurations they check and a report of each check.

use std::time::Instant;

use distlock_model::protocol::{Protocol, Setup};
use stateright::{Checker, HasDiscoveries, Model};

/// The safety properties (every one but the coverage `sometimes`).
pub(crate) const SAFETY: &[&str] = &[
    "mutual exclusion",
    "tokens rise",
    "terms rise",
    "fifo",
    "fifo, newcomers included",
    "no waiter stranded",
    "no stale write lands",
];

/// What a check found.
#[allow(dead_code)]
pub(crate) struct Checked {
    pub(crate) unique: usize,
    pub(crate) depth: usize,
    pub(crate) found: Vec<&'static str>,
    pub(crate) shortest: Vec<(&'static str, String)>,
}

/// Checks `setup` exhaustively (breadth first, every state up to its horizon), or until the
/// first counterexample of `stop_at` (a mutation's property: BFS finds the shortest first).
#[allow(dead_code)]
pub(crate) fn check(name: &str, setup: Setup, stop_at: Option<&'static str>) -> Checked {
    check_model(name, Protocol(setup), stop_at)
}

/// [`check`] of any of the crate's models (the protocol's, RedLock's).
pub(crate) fn check_model<M>(name: &str, model: M, stop_at: Option<&'static str>) -> Checked
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Send + Sync + PartialEq,
    M::Action: Clone + std::fmt::Debug + Send + Sync + PartialEq,
{
    let started = Instant::now();
    let mut checker = model.checker().threads(2);
    if let Some(property) = stop_at {
        checker = checker.finish_when(HasDiscoveries::AnyOf([property].into_iter().collect()));
    }
    let c = checker.spawn_bfs().join();
    let discoveries = c.discoveries();
    let mut found: Vec<&'static str> = discoveries.keys().copied().collect();
    found.sort();
    let shortest = discoveries
        .iter()
        .filter(|(p, _)| SAFETY.contains(p))
        .map(|(p, path)| (*p, format!("{:?}", path.clone().into_actions())))
        .collect();
    eprintln!(
        "{name}: {} states ({} unique), depth {}, {:.1?}; found: {found:?}",
        c.state_count(),
        c.unique_state_count(),
        c.max_depth(),
        started.elapsed()
    );
    Checked {
        unique: c.unique_state_count(),
        depth: c.max_depth(),
        found,
        shortest,
    }
}

/// The safety properties `checked` found violated.
#[allow(dead_code)]
pub(crate) fn violated(checked: &Checked) -> Vec<&'static str> {
    checked
        .found
        .iter()
        .copied()
        .filter(|p| SAFETY.contains(p))
        .collect()
}

/// Random walks (`walks` of them, seeded) over `setup`: each path to its horizon, every
/// state's properties checked.
#[allow(dead_code)]
pub(crate) fn walk(name: &str, setup: Setup, seed: u64, states: usize) -> Vec<&'static str> {
    walk_model(name, Protocol(setup), seed, states)
}

/// [`walk`] over any of the crate's models.
#[allow(dead_code)]
pub(crate) fn walk_model<M>(name: &str, model: M, seed: u64, states: usize) -> Vec<&'static str>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Send + Sync + PartialEq,
    M::Action: Clone + std::fmt::Debug + Send + Sync + PartialEq,
{
    let started = Instant::now();
    let c = model
        .checker()
        .threads(2)
        .target_state_count(states)
        .spawn_simulation(seed, stateright::UniformChooser)
        .join();
    let discoveries = c.discoveries();
    let mut found: Vec<&'static str> = discoveries.keys().copied().collect();
    found.retain(|p| SAFETY.contains(p));
    for p in &found {
        let path = discoveries[p].clone().into_actions();
        eprintln!("{name}: {p:?} violated by {path:?}");
    }
    eprintln!(
        "{name}: random walks (seed {seed}) over {} states, depth {}, {:.1?}; violated: {found:?}",
        c.state_count(),
        c.max_depth(),
        started.elapsed()
    );
    found
}
