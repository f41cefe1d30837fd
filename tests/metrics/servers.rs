//! What a client saw happen to its servers (`distlock_server_events_total{event}`): a server's
//! clock stepping forward and a restart, found by the server check, and a Sentinel failover,
//! counted once; each event's series there at 0 from when the client watches for it (so that
//! `increase()` sees the first one).
//!
//! Only these tests make server events in this process, so the counts are exact.

use std::sync::Arc;
use std::time::Duration;

use distlock::Config;
use testkit::{command_calls, eventually, RedisSentinel, ShiftedClock};

use crate::{counter, recorded, seen, series};

const EVENTS: &str = "distlock_server_events_total";

fn events(event: &str) -> u64 {
    counter(EVENTS, &[("event", event)])
}

/// True if the series of `event` exists (at any value).
fn watched(event: &str) -> bool {
    seen()
        .counters
        .contains_key(&series(EVENTS, &[("event", event)]))
}

#[tokio::test]
async fn a_clock_step_and_a_restart_are_counted() {
    recorded();
    let (mut server, clock) = ShiftedClock::server();
    let client = Config::new(server.url())
        .server_check(Some(Duration::from_millis(50)))
        .connect()
        .await
        .expect("connect");
    assert!(watched("clock_step") && watched("restart"));
    assert_eq!((events("clock_step"), events("restart")), (0, 0));

    // The check has read the clock once (`TIME`): the step comes between two readings.
    let admin = server.conn().await;
    eventually(Duration::from_secs(5), "a first reading", || async {
        (command_calls(&mut admin.clone(), "time").await >= 1).then_some(())
    })
    .await;
    clock.step_forward(Duration::from_secs(30));
    eventually(Duration::from_secs(5), "the step counted", || async {
        (events("clock_step") == 1).then_some(())
    })
    .await;
    assert_eq!(events("restart"), 0);

    server.restart();
    eventually(Duration::from_secs(5), "the restart counted", || async {
        (events("restart") == 1).then_some(())
    })
    .await;
    assert_eq!(events("clock_step"), 1, "a restart is no step");
    drop(client);
}

#[tokio::test]
async fn a_sentinel_failover_is_counted_once() {
    recorded();
    let group = Arc::new(RedisSentinel::start());
    let client = Config::sentinel(group.sentinel_urls(), RedisSentinel::SERVICE)
        .connect()
        .await
        .expect("connect through the sentinels");
    // The first use connects to the master and watches the sentinels.
    let guard = client.lock("switch").acquire().await.unwrap();
    guard.release().await.unwrap();
    assert!(watched("master_switch"));
    assert_eq!(events("master_switch"), 0);

    let failing_over = group.clone();
    tokio::task::spawn_blocking(move || failing_over.failover())
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the switch counted", || async {
        (events("master_switch") >= 1).then_some(())
    })
    .await;
    // A lock on the new master: the client has moved there, and the sentinels asked every
    // 500 ms meanwhile named the master already announced (the same switch).
    let guard = client.lock("switch").acquire().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(events("master_switch"), 1);
}
