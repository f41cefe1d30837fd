//! Scenario 7: network faults between the client and Redis, injected by the in-test proxy.
//!
//! Protocol `d2` has two acquire paths, and every fault below is aimed at each: the plain
//! acquire (`SET <lock> d2:<owner> NX PX <ms> GET` pipelined with `ECHO <request id>`) and the
//! fenced acquire (`EVALSHA` of the fence script).
//!
//! 7a: latency below the response timeout (everything works), a reply delayed past the
//! timeout (the caller gets `Timeout`, the late lock is cleaned up, the connection stays in
//! sync), a reply lost with its connection after the acquire ran (the retry sends the same
//! value and recognises its own take: the acquire succeeds, the lock holds this client's one
//! value, and one release frees it; formerly "2 fixed fields + 1 hold, not 2", but holds are
//! counted on the client now), a partition that heals (timeouts, renewed lock reported lost,
//! then in sync again), and every connection reset (next operations succeed, a renewed lock
//! survives).
//!
//! 7b: the reply to one acquire is dropped while the connection stays open (for the plain
//! acquire, the `SET`'s reply, the first of its pipelined pair: the client reads the `ECHO`
//! reply in the `SET`'s slot and the next request's reply in the `ECHO`'s slot, so the echo
//! does not match, or is no string at all, and the connection is retired; a caller whose echo
//! slot was left empty times out). Which caller of the two that follow sends first is varied:
//! the replies shift differently. Every guard the client gets must match Redis (the lock holds
//! this client's value, and for a fenced guard the fence key holds its token; no lock owned by
//! someone else), and once every caller is done no hold of the client may remain.

use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Error, LockGuard, LossReason};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::proxy::{Proxy, ReplyFault};
use testkit::RedisServer;
use tokio::time::Instant;

use crate::common::{
    acquire_for, acquire_renewed, agrees_with_redis, fast_client, lock_keys, lock_value, ms,
    no_lock_left, owner_tag, Kind, Settings,
};
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

/// Matches the acquire of `kind`, by its command: for the plain acquire the pipeline's
/// `SET <lock> <value> NX PX <ms> GET` (its first command, so the reply faulted is the
/// acquire's own, not the `PTTL` or `ECHO` reply behind it), for the fenced acquire
/// `EVALSHA <sha of the fence script> ...`. Both are sent on command connections only.
fn is_acquire(kind: Kind) -> impl Fn(&[Vec<u8>]) -> bool + Send + 'static {
    let sha = redis::Script::new(distlock::scripts::ACQUIRE_FENCED)
        .get_hash()
        .to_owned();
    move |args: &[Vec<u8>]| match kind {
        Kind::Plain => {
            let has = |word: &[u8]| args[3..].iter().any(|a| a.eq_ignore_ascii_case(word));
            args.len() > 3 && args[0].eq_ignore_ascii_case(b"SET") && has(b"NX") && has(b"GET")
        }
        Kind::Fenced => {
            args.len() > 1 && args[0].eq_ignore_ascii_case(b"EVALSHA") && args[1] == sha.as_bytes()
        }
    }
}

/// The guard agrees with Redis: the lock holds one value of this client (`tag`) with a lease,
/// and a fenced guard's token is the fence key's (formerly: the lock hash's token field and
/// exactly one hold field; holds are counted on the client now, and `in_sync` checks that one
/// release frees the lock).
async fn matches_redis(
    conn: &mut MultiplexedConnection,
    name: &str,
    guard: &LockGuard,
    kind: Kind,
    tag: &str,
) -> Result<(), String> {
    agrees_with_redis(conn, name, guard, kind.fenced(), Some(tag)).await
}

/// `n` sequential acquire/release pairs (alternately plain and fenced) whose results are
/// checked against Redis.
async fn in_sync(
    client: &Client,
    conn: &mut MultiplexedConnection,
    prefix: &str,
    n: usize,
    tag: &str,
) -> Result<(), String> {
    for i in 0..n {
        let kind = Kind::BOTH[i % 2];
        let name = format!("{prefix}-{i}");
        let guard = kind
            .acquire(client, &name, Duration::from_secs(10))
            .await
            .map_err(|e| format!("{} acquire {name}: {e}", kind.as_str()))?;
        matches_redis(conn, &name, &guard, kind, tag)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        guard
            .release()
            .await
            .map_err(|e| format!("release {name}: {e}"))?;
        if lock_value(conn, &name).await.is_some() {
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
    let proxy = Proxy::to(&server).await;
    let client = fast_client(&proxy.url()).await;
    let tag = owner_tag(&client, &mut conn, "tag-probe").await;

    // Latency below the response timeout: slower, nothing else.
    proxy.set_latency(Duration::from_millis(100));
    let started = Instant::now();
    let result = in_sync(&client, &mut conn, "lat", rounds as usize, &tag).await;
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

    // A reply delayed past the response timeout: Timeout, the late lock is cleaned up.
    for round in 0..rounds {
        for kind in Kind::BOTH {
            let name = format!("late-{}-{round}", kind.as_str());
            proxy.fault_next_replies(
                1,
                ReplyFault::Delay(Duration::from_millis(700)),
                is_acquire(kind),
            );
            let started = Instant::now();
            let result = kind.acquire(&client, &name, Duration::from_secs(30)).await;
            let took = started.elapsed();
            t.ops(1);
            t.faults(1);
            t.check(matches!(result, Err(Error::Timeout { .. })), || {
                format!(
                    "late reply ({}): acquire returned {result:?}, not Timeout",
                    kind.as_str()
                )
            });
            t.check(took <= CALL_BOUND, || {
                format!(
                    "late reply ({}): acquire took {} ms",
                    kind.as_str(),
                    ms(took)
                )
            });
            drop(result);
            at_rest(&client).await;
            t.check(lock_value(&mut conn, &name).await.is_none(), || {
                format!(
                    "late reply: the lock taken by the timed-out acquire of {name} was not cleaned up"
                )
            });
            let prefix = format!("after-late-{}-{round}", kind.as_str());
            let sync = in_sync(&client, &mut conn, &prefix, 3, &tag).await;
            t.check(sync.is_ok(), || {
                format!("after a late reply the connection is out of sync: {sync:?}")
            });
            t.ops(6);
        }
    }

    // The acquire ran but its reply was lost with the connection: retried with the same value,
    // which reads as our own take.
    for round in 0..rounds {
        for kind in Kind::BOTH {
            let name = format!("reset-reply-{}-{round}", kind.as_str());
            proxy.fault_next_replies(1, ReplyFault::Reset, is_acquire(kind));
            let result = kind.acquire(&client, &name, Duration::from_secs(30)).await;
            t.ops(1);
            t.faults(1);
            match result {
                Ok(guard) => {
                    // The retry found the lock holding its own value: one value of this
                    // client, one lease (the d2 form of "2 fixed fields + 1 hold, not 2").
                    let agrees = matches_redis(&mut conn, &name, &guard, kind, &tag).await;
                    t.check(agrees.is_ok(), || {
                        format!(
                            "reply lost with the connection ({}): {agrees:?}",
                            kind.as_str()
                        )
                    });
                    t.check(!guard.is_reentry(), || {
                        format!("{name}: a fresh acquisition retried after its reply was lost reports is_reentry()")
                    });
                    let released = guard.release().await;
                    t.check(released.is_ok(), || {
                        format!("release after the retried acquire: {released:?}")
                    });
                    // One release frees it: the retry did not count a second hold.
                    t.check(lock_value(&mut conn, &name).await.is_none(), || {
                        format!("{name} not released cleanly")
                    });
                    t.ops(1);
                }
                Err(e) => t.violation(format!(
                    "{} acquire whose reply was lost with the connection was not retried: {e}",
                    kind.as_str()
                )),
            }
        }
    }

    // A partition (nothing passes, nothing closes), then it heals.
    let ttl = Duration::from_millis(1200);
    let renewed = acquire_renewed(&client, "partition-renewed", ttl)
        .await
        .expect("acquire");
    proxy.set_blackhole(true);
    t.faults(1);
    for kind in Kind::BOTH {
        let started = Instant::now();
        let name = format!("partition-{}", kind.as_str());
        let result = kind.acquire(&client, &name, Duration::from_secs(30)).await;
        let took = started.elapsed();
        t.check(matches!(result, Err(Error::Timeout { .. })), || {
            format!(
                "partition: {} acquire returned {result:?}, not Timeout",
                kind.as_str()
            )
        });
        t.check(took <= CALL_BOUND, || {
            format!("partition: {} acquire took {} ms", kind.as_str(), ms(took))
        });
        drop(result);
    }
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
    t.ops(4);
    proxy.set_blackhole(false);
    drop(renewed);
    at_rest(&client).await;
    // Every guard is gone and the client is at rest: nothing may stay held. (The stalled
    // acquires reach Redis when the partition heals; their cleanup must come after them.)
    let delivered_by = Instant::now() + Duration::from_secs(2);
    let mut ghosts = lock_keys(&mut conn).await;
    while !ghosts.is_empty() && Instant::now() < delivered_by {
        tokio::time::sleep(Duration::from_millis(20)).await;
        ghosts = lock_keys(&mut conn).await;
    }
    t.check(ghosts.is_empty(), || {
        format!("after the partition healed, locks held by nobody: {ghosts:?}")
    });
    for key in &ghosts {
        let _: () = conn.del(key).await.expect("DEL");
    }
    let sync = in_sync(&client, &mut conn, "healed", 3, &tag).await;
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
        // The first acquire after the reset: plain and fenced in turn.
        let kind = Kind::BOTH[round as usize % 2];
        let name = format!("after-reset-{round}");
        match kind.acquire(&client, &name, Duration::from_secs(10)).await {
            Ok(guard) => {
                let agrees = matches_redis(&mut conn, &name, &guard, kind, &tag).await;
                t.check(agrees.is_ok(), || {
                    format!("after a reset ({}): {agrees:?}", kind.as_str())
                });
                let released = guard.release().await;
                t.check(released.is_ok(), || {
                    format!("release after a reset: {released:?}")
                });
            }
            Err(e) => t.violation(format!(
                "first ({}) acquire after a reset failed: {e}",
                kind.as_str()
            )),
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
    let proxy = Proxy::to(&server).await;
    let other = fast_client(&server.url()).await;
    for round in 0..rounds {
        for kind in Kind::BOTH {
            for busy_first in [true, false] {
                dropped_reply_round(&t, &mut conn, &proxy, &other, round, kind, busy_first).await;
            }
        }
    }
}

/// One round of 7b with acquires of `kind`: the reply to the first is dropped. `busy_first`:
/// of the two callers that follow, the one on the busy lock sends first (the replies shift
/// differently: which caller reads which reply, and which one is left waiting, changes).
async fn dropped_reply_round(
    t: &Tally,
    conn: &mut MultiplexedConnection,
    proxy: &Proxy,
    other: &Client,
    round: u64,
    kind: Kind,
    busy_first: bool,
) {
    let client = fast_client(&proxy.url()).await;
    let tag = owner_tag(&client, conn, &format!("tag-probe-{round}")).await;
    let k = if busy_first {
        format!("{}-busy-first", kind.as_str())
    } else {
        format!("{}-free-first", kind.as_str())
    };
    let (a, b, c) = (
        format!("drop-a-{k}-{round}"),
        format!("drop-busy-{k}-{round}"),
        format!("drop-free-{k}-{round}"),
    );
    let blocker = kind
        .acquire(other, &b, Duration::from_secs(30))
        .await
        .expect("acquire");
    let faulted = proxy.replies_faulted();
    proxy.fault_next_replies(1, ReplyFault::Drop, is_acquire(kind));
    let first = tokio::spawn(
        client
            .lock(a.as_str())
            .ttl(Duration::from_secs(30))
            .fenced(kind.fenced())
            .acquire(),
    );
    t.check(
        proxy
            .wait_faulted(faulted + 1, Duration::from_secs(5))
            .await,
        || format!("the proxy did not drop the reply ({k})"),
    );
    t.faults(1);
    // Two more callers on the same connection while the first waits: one lock is held by
    // `other`, the other is free.
    let (busy, free) = if busy_first {
        tokio::join!(
            kind.acquire(&client, &b, Duration::from_secs(30)),
            kind.acquire(&client, &c, Duration::from_secs(30))
        )
    } else {
        let (free, busy) = tokio::join!(
            kind.acquire(&client, &c, Duration::from_secs(30)),
            kind.acquire(&client, &b, Duration::from_secs(30))
        );
        (busy, free)
    };
    let first = first.await.expect("first caller");
    t.ops(3);
    let mut outcomes = Vec::new();
    for (name, result) in [(&a, first), (&b, busy), (&c, free)] {
        outcomes.push(format!("{name}: {}", describe(&result)));
        if let Ok(guard) = &result {
            let agrees = matches_redis(conn, name, guard, kind, &tag).await;
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
    t.note(format!("round {round} ({k}): {}", outcomes.join("; ")));
    // Once every caller is done (guards dropped, cleanup finished), no hold of the
    // client may remain.
    blocker.release().await.expect("release by other");
    let finished = tokio::time::timeout(Duration::from_secs(10), at_rest(&client)).await;
    t.check(finished.is_ok(), || {
        "background cleanup did not finish".to_owned()
    });
    let left = lock_keys(conn).await;
    t.check(left.is_empty(), || {
        format!("holds left after every caller finished ({k}): {left:?}")
    });
    // Later calls through the same client are answered correctly.
    let sync = in_sync(&client, conn, &format!("drop-after-{k}-{round}"), 3, &tag).await;
    t.check(sync.is_ok(), || {
        format!(
            "later calls after the dropped reply ({k}): {}",
            sync.clone().unwrap_err()
        )
    });
    t.ops(6);
    // Leave a clean server for the next round.
    let _: () = redis::cmd("FLUSHALL")
        .query_async(conn)
        .await
        .expect("FLUSHALL");
}

fn describe(result: &Result<LockGuard, Error>) -> String {
    match result {
        Ok(guard) => match guard.token() {
            Some(token) => format!("Ok(token {token})"),
            None => "Ok(unfenced)".to_owned(),
        },
        Err(Error::Busy { .. }) => "Err(Busy)".to_owned(),
        Err(Error::Timeout { .. }) => "Err(Timeout)".to_owned(),
        Err(e) => format!("Err({e})"),
    }
}
