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
    "a live waiter is not kept waiting by dead waiters",
];

/// What a check found.
#[allow(dead_code)]
pub(crate) struct Checked {
    pub(crate) unique: usize,
    pub(crate) depth: usize,
    /// The length of the shortest counterexample of each safety property found.
    pub(crate) lengths: Vec<(&'static str, usize)>,
    pub(crate) found: Vec<&'static str>,
    pub(crate) shortest: Vec<(&'static str, String)>,
}

/// Checks `setup` exhaustively (breadth first, every state up to its horizon), or until the
/// first counterexample of `stop_at` (a mutation's property: BFS finds the shortest first).
#[allow(dead_code)]
pub(crate) fn check(name: &str, setup: Setup, stop_at: Option<&'static str>) -> Checked {
    check_model(name, Protocol(setup), stop_at)
}

/// [`check`] of every state up to `depth` steps (breadth first) only.
#[allow(dead_code)]
pub(crate) fn check_to(name: &str, setup: Setup, depth: usize) -> Checked {
    check_bounded(name, Protocol(setup), None, Some(depth))
}

/// [`check`] of any of the crate's models (the protocol's, RedLock's).
pub(crate) fn check_model<M>(name: &str, model: M, stop_at: Option<&'static str>) -> Checked
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Send + Sync + PartialEq,
    M::Action: Clone + std::fmt::Debug + Send + Sync + PartialEq,
{
    check_bounded(name, model, stop_at, None)
}

/// [`check_model`], to `depth` steps only if given.
fn check_bounded<M>(
    name: &str,
    model: M,
    stop_at: Option<&'static str>,
    depth: Option<usize>,
) -> Checked
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Send + Sync + PartialEq,
    M::Action: Clone + std::fmt::Debug + Send + Sync + PartialEq,
{
    let started = Instant::now();
    let mut checker = model.checker().threads(2);
    if let Some(depth) = depth {
        checker = checker.target_max_depth(depth);
    }
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
    let lengths = discoveries
        .iter()
        .filter(|(p, _)| SAFETY.contains(p))
        .map(|(p, path)| (*p, path.clone().into_actions().len()))
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
        lengths,
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
