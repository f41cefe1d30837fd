//! Scenario 6: connections killed by the server (`CLIENT KILL`) and scripts flushed
//! (`SCRIPT FLUSH`) between operations.
//!
//! After each fault the very next acquire and release succeed (no `eventually`), a waiter
//! subscribed before the fault is still woken by the release, and a renewed lock held across
//! every round is never lost.
//!
//! Protocol `d2` has two acquire paths: the plain `SET NX PX GET` pipeline (no script, so
//! `SCRIPT FLUSH` does not touch it) and the fenced acquire script. Each round takes one lock on
//! each path; which of them is the very next command after the fault is drawn at random, and
//! both must succeed first try.

use std::sync::Arc;
use std::time::Duration;

use distlock::Client;
use redis::aio::MultiplexedConnection;
use testkit::RedisServer;
use tokio::time::Instant;

use crate::common::{
    acquire_for, acquire_renewed, fast_client, lock_keys, ms, no_channel_left, pubsub_channels,
    Kind, Rng, Settings,
};
use crate::report::{Scenario, Tally};

#[derive(Debug, Clone, Copy)]
enum Fault {
    ScriptFlush,
    KillCommandConnections,
    KillSubscriberConnections,
    KillAllAndFlush,
}

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let title = "CLIENT KILL / SCRIPT FLUSH between operations";
    let seed = s.seed;
    Scenario::repeated("6", title, s.pick(12, 60), budget, move |t, rounds| {
        run(t, rounds, seed)
    })
}

async fn inject(admin: &mut MultiplexedConnection, fault: Fault) {
    let flush = || redis::cmd("SCRIPT").arg("FLUSH").to_owned();
    let kill = |kind: &str| {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kind)
            .arg("SKIPME")
            .arg("yes")
            .to_owned()
    };
    let cmds = match fault {
        Fault::ScriptFlush => vec![flush()],
        Fault::KillCommandConnections => vec![kill("normal")],
        Fault::KillSubscriberConnections => vec![kill("pubsub")],
        Fault::KillAllAndFlush => vec![flush(), kill("normal"), kill("pubsub")],
    };
    for cmd in cmds {
        let _: redis::Value = cmd.query_async(admin).await.expect("inject fault");
    }
}

async fn run(t: Arc<Tally>, rounds: u64, seed: u64) {
    let server = RedisServer::start();
    let mut admin = server.conn().await;
    let client = fast_client(&server.url()).await;
    let other = fast_client(&server.url()).await;
    let mut rng = Rng::new(seed);
    t.note(format!("seed {seed}"));
    let renew_ttl = Duration::from_millis(600);
    let renewed = acquire_renewed(&client, "cf-renewed", renew_ttl)
        .await
        .expect("acquire");
    let mut counts = [0u64; 4];
    let mut fenced_first = 0u64;
    let mut slowest_wake = Duration::ZERO;
    for round in 0..rounds {
        let fault = match rng.below(4) {
            0 => Fault::ScriptFlush,
            1 => Fault::KillCommandConnections,
            2 => Fault::KillSubscriberConnections,
            _ => Fault::KillAllAndFlush,
        };
        counts[fault as usize] += 1;
        let order = if rng.percent(50) {
            fenced_first += 1;
            [Kind::Fenced, Kind::Plain]
        } else {
            [Kind::Plain, Kind::Fenced]
        };
        // A waiter subscribed before the fault.
        let blocker_name = format!("cf-wait-{round}");
        let blocker = acquire_for(&other, &blocker_name, Duration::from_secs(30))
            .await
            .expect("acquire");
        let waiter = tokio::spawn({
            let lock = client
                .lock(blocker_name.as_str())
                .wait(Duration::from_secs(10));
            async move { lock.acquire().await }
        });
        wait_subscribed(&client, &mut admin, &blocker_name).await;
        t.ops(1);

        inject(&mut admin, fault).await;
        t.faults(1);

        // The next operations succeed, first try (on both acquire paths).
        for (nth, kind) in order.into_iter().enumerate() {
            let name = format!("cf-{round}-{}", kind.as_str());
            let which = if nth == 0 { "first" } else { "second" };
            match kind.acquire(&client, &name, Duration::from_secs(5)).await {
                Ok(guard) => {
                    t.check(guard.token().is_some() == kind.fenced(), || {
                        format!(
                            "round {round} ({fault:?}): {} acquire returned token {:?}",
                            kind.as_str(),
                            guard.token()
                        )
                    });
                    let released = guard.release().await;
                    release_check(&t, &released, || {
                        format!(
                            "round {round} ({fault:?}): the release right after the {which} ({}) acquire",
                            kind.as_str()
                        )
                    });
                }
                Err(e) => t.violation(format!(
                    "round {round} ({fault:?}): {which} acquire after the fault ({}) failed: {e}",
                    kind.as_str()
                )),
            }
            t.ops(2);
        }
        // The waiter is still woken by the release (not by the blocker's 30 s ttl).
        // `other`'s first command after the fault: its connection may be the one killed.
        let released_at = Instant::now();
        let released = blocker.release().await;
        release_check(&t, &released, || {
            format!("round {round} ({fault:?}): the other client's first release after the fault")
        });
        match tokio::time::timeout(Duration::from_secs(3), waiter).await {
            Ok(Ok(Ok(g))) => {
                let woke = released_at.elapsed();
                slowest_wake = slowest_wake.max(woke);
                t.check(woke <= Duration::from_secs(1), || {
                    format!(
                        "round {round} ({fault:?}): waiter woke {} ms after the release",
                        ms(woke)
                    )
                });
                let _ = g.release().await;
            }
            // Still asleep: the release was published while its subscriber reconnected.
            Err(_) => t.violation(format!(
                "round {round} ({fault:?}): the waiter was not woken by the release within 3 s (blocker ttl 30 s)"
            )),
            other => t.violation(format!("round {round} ({fault:?}): waiter: {other:?}")),
        }
        t.ops(3);
    }
    t.check(renewed.lost_reason().is_none(), || {
        format!(
            "the renewed lock was lost across the faults: {:?}",
            renewed.lost_reason()
        )
    });
    if let Err(e) = renewed.release().await {
        t.violation(format!("release of the renewed lock failed: {e}"));
    }
    t.ops(2);
    for c in [&client, &other] {
        testkit::eventually(Duration::from_secs(5), "client at rest", || {
            let c = c.clone();
            async move {
                (c.background_tasks() == 0 && c.renewing() == 0 && c.waiting_channels() == 0)
                    .then_some(())
            }
        })
        .await;
    }
    let left = lock_keys(&mut admin).await;
    t.check(left.is_empty(), || format!("lock keys left: {left:?}"));
    let channels = no_channel_left(&admin, Duration::from_secs(5)).await;
    t.check(channels.is_empty(), || {
        format!("channels left: {channels:?}")
    });
    t.note(format!(
        "faults: {} SCRIPT FLUSH, {} kill command conns, {} kill subscriber conns, {} all; fenced acquire first after {fenced_first} of {rounds}; slowest wake {} ms",
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        ms(slowest_wake)
    ));
}

/// A release right after a connection fault must succeed (it is retried after a dropped
/// connection).
fn release_check(t: &Tally, released: &Result<(), distlock::Error>, what: impl Fn() -> String) {
    if let Err(e) = released {
        t.violation(format!("{} failed: {e}", what()));
    }
}

/// Waits until the client has a waiter on `name` and the server confirms the subscription.
async fn wait_subscribed(client: &Client, admin: &mut MultiplexedConnection, name: &str) {
    let channel = format!("distlock:{{{name}}}:released");
    testkit::eventually(Duration::from_secs(5), "waiter subscribed", || {
        let client = client.clone();
        let mut admin = admin.clone();
        let channel = channel.clone();
        async move {
            let subscribed = pubsub_channels(&mut admin).await.contains(&channel);
            (subscribed && client.waiting_channels() >= 1).then_some(())
        }
    })
    .await;
}
