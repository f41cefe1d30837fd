//! RedLock helpers: a quorum's clients at rest, and the `NoQuorum` a call must end with.

use std::time::Duration;

use crate::inspect::eventually;

/// Waits until none of `clients` has a background task left (RedLock stragglers, background
/// releases, unsubscribes), failing after `within`.
pub async fn at_rest(clients: &[&distlock::Client], within: Duration) {
    eventually(within, "the clients' background tasks finish", || async {
        clients
            .iter()
            .all(|c| c.background_tasks() == 0)
            .then_some(())
    })
    .await;
}

/// Asserts that `result` failed with `Error::NoQuorum` for a majority of `required`, with fewer
/// than that agreeing.
pub fn expect_no_quorum<T: std::fmt::Debug>(result: Result<T, distlock::Error>, required: usize) {
    match result {
        Err(distlock::Error::NoQuorum {
            agreed,
            required: needed,
            ..
        }) => {
            assert_eq!(needed, required, "the majority named");
            assert!(agreed < required, "{agreed} agreed, yet NoQuorum");
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}
