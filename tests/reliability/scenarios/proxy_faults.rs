//! Scenario 7: network faults between the client and Redis, injected by the in-test proxy.
//!
//! 7a: latency below the response timeout (everything works), a reply delayed past the
//! timeout (the caller gets `Timeout`, the late hold is cleaned up, the connection stays in
//! sync), a reply lost with its connection after the acquire script ran (the retry uses the
//! same hold: 2 fixed fields + 1 hold, not 2), a partition that heals (timeouts, renewed lock
//! reported lost, then in sync again), and every connection reset (next operations succeed,
//! a renewed lock survives).
//!
//! 7b: the reply to one acquire is dropped while the connection stays open. Every guard the
//! client gets must match Redis (its token, no lock owned by someone else), and once every
//! caller is done no hold of the client may remain.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Error, LockGuard, LossReason};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::RedisServer;
use tokio::time::Instant;

use crate::common::{
    acquire_for, acquire_renewed, fast_client, lock_fields, lock_hashes, lock_key, ms,
    no_lock_left, Settings,
};
use crate::proxy::{Proxy, ReplyFault};
use crate::report::{Scenario, Tally};

/// Bound on a failing call: the operation timeout (400 ms + 10% + 10 ms) plus slack.
const CALL_BOUND: Duration = Duration::from_millis(750);

pub(crate) fn latency_and_resets(s: &Settings, budget: Duration) -> Scenario {
    let title = "proxy: latency, late reply, reply lost with reset, partition, resets";
    Scenario::repeated("7a", title, s.pick(3, 15), budget, run_latency_and_resets)
}

pub(crate) fn dropped_reply(s: &Settings, budget: Duration) -> Scenario {
    let title = "proxy: acquire reply dropped, connection kept open";
    Scenario::repeated("7b", title, s.pick(1, 5), budget, run_dropped_reply)
}

fn upstream(server: &RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port()))
}

/// Matches `EVALSHA <sha of the acquire script> ...`.
fn is_acquire() -> impl Fn(&[Vec<u8>]) -> bool + Send + 'static {
    let sha = redis::Script::new(distlock::scripts::ACQUIRE)
        .get_hash()
        .to_owned();
    move |args: &[Vec<u8>]| {
        args.len() > 1 && args[0].eq_ignore_ascii_case(b"EVALSHA") && args[1] == sha.as_bytes()
    }
}

/// The guard agrees with Redis: the lock exists with the guard's token and one hold.
async fn matches_redis(
    conn: &mut MultiplexedConnection,
    name: &str,
    guard: &LockGuard,
) -> Result<(), String> {
    let token: Option<u64> = conn
        .hget(lock_key(name), "f")
        .await
        .map_err(|e| e.to_string())?;
    let fields = lock_fields(conn, name).await;
    if token != Some(guard.token()) {
        return Err(format!(
            "guard token {} but Redis has {token:?}",
            guard.token()
        ));
    }
    if fields != 3 {
        return Err(format!(
            "{fields} fields in the lock hash, expected 2 + 1 hold"
        ));
    }
    Ok(())
}

/// `n` sequential acquire/release pairs whose results are checked against Redis.
async fn in_sync(
    client: &Client,
    conn: &mut MultiplexedConnection,
    prefix: &str,
    n: usize,
) -> Result<(), String> {
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let guard = acquire_for(client, &name, Duration::from_secs(10))
            .await
            .map_err(|e| format!("acquire {name}: {e}"))?;
        matches_redis(conn, &name, &guard)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        guard
            .release()
            .await
            .map_err(|e| format!("release {name}: {e}"))?;
        if lock_fields(conn, &name).await != 0 {
            return Err(format!("{name} still held after release"));
        }
    }
    Ok(())
}

async fn at_rest(client: &Client) {
    testkit::eventually(Duration::from_secs(10), "client at rest", || {
        let client = client.clone();
        async move { (client.background_tasks() == 0).then_some(()) }
    })
    .await;
}

async fn run_latency_and_resets(t: Arc<Tally>, rounds: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let proxy = Proxy::start(upstream(&server)).await;
    let client = fast_client(&proxy.url()).await;

    // Latency below the response timeout: slower, nothing else.
    proxy.set_latency(Duration::from_millis(100));
    let started = Instant::now();
    let result = in_sync(&client, &mut conn, "lat", rounds as usize).await;
    t.check(result.is_ok(), || {
        format!("with 100 ms latency: {result:?}")
    });
    t.ops(2 * rounds);
    t.faults(rounds);
    let slow = started.elapsed();
    t.check(
        slow >= Duration::from_millis(100) * (2 * rounds as u32),
        || "the latency was not applied".to_owned(),
    );
    proxy.set_latency(Duration::ZERO);

    // A reply delayed past the response timeout: Timeout, the late hold is cleaned up.
    for round in 0..rounds {
        let name = format!("late-{round}");
        proxy.fault_next_replies(
            1,
            ReplyFault::Delay(Duration::from_millis(700)),
            is_acquire(),
        );
        let started = Instant::now();
        let result = acquire_for(&client, &name, Duration::from_secs(30)).await;
        let took = started.elapsed();
        t.ops(1);
        t.faults(1);
        t.check(matches!(result, Err(Error::Timeout { .. })), || {
            format!("late reply: acquire returned {result:?}, not Timeout")
        });
        t.check(took <= CALL_BOUND, || {
            format!("late reply: acquire took {} ms", ms(took))
        });
        drop(result);
        at_rest(&client).await;
        t.check(lock_fields(&mut conn, &name).await == 0, || {
            format!(
                "late reply: the hold taken by the timed-out acquire of {name} was not cleaned up"
            )
        });
        let sync = in_sync(&client, &mut conn, &format!("after-late-{round}"), 3).await;
        t.check(sync.is_ok(), || {
            format!("after a late reply the connection is out of sync: {sync:?}")
        });
        t.ops(6);
    }

    // The acquire script ran but its reply was lost with the connection: retried, same hold.
    for round in 0..rounds {
        let name = format!("reset-reply-{round}");
        proxy.fault_next_replies(1, ReplyFault::Reset, is_acquire());
        let result = acquire_for(&client, &name, Duration::from_secs(30)).await;
        t.ops(1);
        t.faults(1);
        match result {
            Ok(guard) => {
                let fields = lock_fields(&mut conn, &name).await;
                t.check(fields == 3, || {
                    format!("reply lost with the connection: {fields} fields, expected 2 + 1 hold")
                });
                let agrees = matches_redis(&mut conn, &name, &guard).await;
                t.check(agrees.is_ok(), || {
                    format!("reply lost with the connection: {agrees:?}")
                });
                t.check(!guard.is_reentry(), || {
                    format!("{name}: a fresh acquisition retried after its reply was lost reports is_reentry()")
                });
                let released = guard.release().await;
                t.check(released.is_ok(), || {
                    format!("release after the retried acquire: {released:?}")
                });
                t.check(lock_fields(&mut conn, &name).await == 0, || {
                    format!("{name} not released cleanly")
                });
                t.ops(1);
            }
            Err(e) => t.violation(format!(
                "acquire whose reply was lost with the connection was not retried: {e}"
            )),
        }
    }

    // A partition (nothing passes, nothing closes), then it heals.
    let ttl = Duration::from_millis(1200);
    let renewed = acquire_renewed(&client, "partition-renewed", ttl)
        .await
        .expect("acquire");
    proxy.set_blackhole(true);
    t.faults(1);
    let started = Instant::now();
    let result = client.lock("partition").acquire().await;
    let took = started.elapsed();
    t.check(matches!(result, Err(Error::Timeout { .. })), || {
        format!("partition: acquire returned {result:?}, not Timeout")
    });
    t.check(took <= CALL_BOUND, || {
        format!("partition: acquire took {} ms", ms(took))
    });
    drop(result);
    match tokio::time::timeout(ttl * 3, renewed.lost()).await {
        Ok(reason) => {
            let late = Instant::now().saturating_duration_since(renewed.guaranteed_until());
            t.check(reason == LossReason::Unreachable, || {
                format!("partition: renewed lock lost with {reason:?}")
            });
            t.check(late <= Duration::from_millis(150), || {
                format!(
                    "partition: loss reported {} ms after the deadline",
                    ms(late)
                )
            });
        }
        Err(_) => t.violation("partition: the renewed lock was not reported lost".to_owned()),
    }
    t.ops(3);
    proxy.set_blackhole(false);
    drop(renewed);
    at_rest(&client).await;
    // Every guard is gone and the client is at rest: nothing may stay held. (The stalled
    // acquire reaches Redis when the partition heals; its cleanup must come after it.)
    let delivered_by = Instant::now() + Duration::from_secs(2);
    let mut ghosts = lock_hashes(&mut conn).await;
    while !ghosts.is_empty() && Instant::now() < delivered_by {
        tokio::time::sleep(Duration::from_millis(20)).await;
        ghosts = lock_hashes(&mut conn).await;
    }
    t.check(ghosts.is_empty(), || {
        format!("after the partition healed, locks held by nobody: {ghosts:?}")
    });
    for key in &ghosts {
        let _: () = conn.del(key).await.expect("DEL");
    }
    let sync = in_sync(&client, &mut conn, "healed", 3).await;
    t.check(sync.is_ok(), || {
        format!("after the partition healed: {sync:?}")
    });
    t.ops(6);

    // Every connection reset: next operations succeed, a renewed lock survives.
    let renewed = acquire_renewed(&client, "reset-renewed", ttl)
        .await
        .expect("acquire");
    for round in 0..rounds {
        let held_name = format!("reset-held-{round}");
        let held = acquire_for(&client, held_name, Duration::from_secs(10))
            .await
            .expect("acquire");
        proxy.reset_all();
        t.faults(1);
        // The first command after the reset is a release.
        if let Err(e) = held.release().await {
            t.violation(format!("first release after a reset failed: {e}"));
        }
        proxy.reset_all();
        t.faults(1);
        let name = format!("after-reset-{round}");
        match acquire_for(&client, &name, Duration::from_secs(10)).await {
            Ok(guard) => {
                let agrees = matches_redis(&mut conn, &name, &guard).await;
                t.check(agrees.is_ok(), || format!("after a reset: {agrees:?}"));
                let released = guard.release().await;
                t.check(released.is_ok(), || {
                    format!("release after a reset: {released:?}")
                });
            }
            Err(e) => t.violation(format!("first acquire after a reset failed: {e}")),
        }
        t.ops(3);
    }
    t.check(renewed.lost_reason().is_none(), || {
        format!(
            "renewed lock lost across resets: {:?}",
            renewed.lost_reason()
        )
    });
    let released = renewed.release().await;
    t.check(released.is_ok(), || {
        format!("release of the renewed lock: {released:?}")
    });
    at_rest(&client).await;
    let left = no_lock_left(&conn, Duration::from_secs(5)).await;
    t.check(left.is_empty(), || format!("lock keys left: {left:?}"));
    t.note(format!(
        "{} connections through the proxy; {} replies delayed/lost/reset",
        proxy.accepted(),
        proxy.replies_faulted()
    ));
}

async fn run_dropped_reply(t: Arc<Tally>, rounds: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let proxy = Proxy::start(upstream(&server)).await;
    let other = fast_client(&server.url()).await;
    for round in 0..rounds {
        let client = fast_client(&proxy.url()).await;
        let (a, b, c) = (
            format!("drop-a-{round}"),
            format!("drop-busy-{round}"),
            format!("drop-free-{round}"),
        );
        let blocker = acquire_for(&other, &b, Duration::from_secs(30))
            .await
            .expect("acquire");
        let faulted = proxy.replies_faulted();
        proxy.fault_next_replies(1, ReplyFault::Drop, is_acquire());
        let first = tokio::spawn(
            client
                .lock(a.as_str())
                .ttl(Duration::from_secs(30))
                .acquire(),
        );
        t.check(
            proxy
                .wait_faulted(faulted + 1, Duration::from_secs(5))
                .await,
            || "the proxy did not drop the reply".to_owned(),
        );
        t.faults(1);
        // Two more callers on the same connection while the first waits: one lock is held by
        // `other`, the other is free.
        let (busy, free) = tokio::join!(
            acquire_for(&client, &b, Duration::from_secs(30)),
            acquire_for(&client, &c, Duration::from_secs(30))
        );
        let first = first.await.expect("first caller");
        t.ops(3);
        let mut outcomes = Vec::new();
        for (name, result) in [(&a, first), (&b, busy), (&c, free)] {
            outcomes.push(format!("{name}: {}", describe(&result)));
            if let Ok(guard) = &result {
                let agrees = matches_redis(&mut conn, name, guard).await;
                t.check(agrees.is_ok(), || {
                    format!(
                        "the client got a guard for {name} that Redis contradicts: {}",
                        agrees.clone().unwrap_err()
                    )
                });
            }
            if name == &b {
                t.check(result.is_err(), || {
                    format!("the client got a guard for {b}, which `other` holds: two holders")
                });
            }
        }
        t.note(format!("round {round}: {}", outcomes.join("; ")));
        // Once every caller is done (guards dropped, cleanup finished), no hold of the
        // client may remain.
        blocker.release().await.expect("release by other");
        let finished = tokio::time::timeout(Duration::from_secs(10), at_rest(&client)).await;
        t.check(finished.is_ok(), || {
            "background cleanup did not finish".to_owned()
        });
        let left = lock_hashes(&mut conn).await;
        t.check(left.is_empty(), || {
            format!("holds left after every caller finished: {left:?}")
        });
        // Later calls through the same client are answered correctly.
        let sync = in_sync(&client, &mut conn, &format!("drop-after-{round}"), 3).await;
        t.check(sync.is_ok(), || {
            format!(
                "later calls after the dropped reply: {}",
                sync.clone().unwrap_err()
            )
        });
        t.ops(6);
        // Leave a clean server for the next round.
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut conn)
            .await
            .expect("FLUSHALL");
    }
}

fn describe(result: &Result<LockGuard, Error>) -> String {
    match result {
        Ok(guard) => format!("Ok(token {})", guard.token()),
        Err(Error::Busy { .. }) => "Err(Busy)".to_owned(),
        Err(Error::Timeout { .. }) => "Err(Timeout)".to_owned(),
        Err(e) => format!("Err({e})"),
    }
}
