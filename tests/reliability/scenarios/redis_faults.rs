//! Scenarios 4 and 5: the Redis server is frozen (`SIGSTOP`) or killed and restarted on the
//! same port.
//!
//! Frozen: callers fail with `Error::Timeout` within a bound derived from the configured
//! response timeout (no hang), renewed locks report `Lost(Unreachable)` no later than their
//! guaranteed deadline, bodies under `run` are cancelled, and everything works again after
//! `SIGCONT` with the same client.
//!
//! Restarted: acquires fail with a transient error naming the lock during the outage, locks
//! held before are reported lost, and afterwards acquires (and release notifications to
//! waiters) work again through the same client, with no re-init.

use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Error, LockGuard, LossReason};
use testkit::RedisServer;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::common::{
    acquire_for, acquire_renewed, fast_client, lock_keys, ms, no_lock_left, spawn_acquire,
    token_of, Settings,
};
use crate::report::{Scenario, Tally};

/// The response timeout of [`crate::common::fast_config`].
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(400);

/// How long one acquire/release may take against a frozen server: the client's operation
/// timeout (response timeout + 10% + 10 ms; a timeout is not retried) plus scheduling slack.
fn frozen_bound() -> Duration {
    RESPONSE_TIMEOUT
        + RESPONSE_TIMEOUT / 10
        + Duration::from_millis(10)
        + Duration::from_millis(250)
}

pub(crate) fn paused(s: &Settings, budget: Duration) -> Scenario {
    let callers = s.pick(5, 50);
    Scenario::new(
        "4",
        format!("Redis SIGSTOPped: {callers} callers time out, renewed locks lost"),
        budget,
        move |t| run_paused(t, callers),
    )
}

pub(crate) fn restarted(s: &Settings, budget: Duration) -> Scenario {
    let title = "Redis kill -9 + restart on the same port";
    Scenario::repeated("5", title, s.pick(2, 5), budget, run_restarted)
}

/// Holds `name` through `run` with a body that never finishes; resolves once the body runs.
async fn hold_in_run(
    client: &Client,
    name: &str,
    ttl: Duration,
) -> tokio::task::JoinHandle<Result<(), Error>> {
    let (started_tx, started_rx) = oneshot::channel();
    let task = tokio::spawn(client.lock(name).ttl(ttl).renew(true).run(async move {
        let _ = started_tx.send(());
        std::future::pending::<()>().await;
    }));
    started_rx.await.expect("the body started");
    task
}

/// Waits until the client has one waiter subscribed (the waiter is on a lock held elsewhere).
async fn waiter_subscribed(client: &Client) {
    testkit::eventually(Duration::from_secs(5), "waiter subscribed", || {
        let client = client.clone();
        async move { (client.waiting_channels() == 1).then_some(()) }
    })
    .await;
}

/// Acquires `name` (fenced: the caller may compare tokens) once Redis is back (`what`: after
/// which fault), retrying until it works; returns the guard and the number of attempts it took.
async fn acquire_when_back(client: &Client, name: &'static str, what: &str) -> (LockGuard, u64) {
    let mut attempts = 0;
    let guard = testkit::eventually(Duration::from_secs(10), what, || {
        attempts += 1;
        let client = client.clone();
        async move { client.lock(name).fenced(true).acquire().await.ok() }
    })
    .await;
    (guard, attempts)
}

async fn run_paused(t: Arc<Tally>, callers: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let client = fast_client(&server.url()).await;
    let ttl = Duration::from_millis(1500);

    let body = hold_in_run(&client, "frozen-run", ttl).await;
    let guard = acquire_renewed(&client, "frozen-guard", ttl)
        .await
        .expect("acquire");
    // Commands sent during the freeze may be applied late (queued while Redis was frozen) or
    // never (cleanup that could not be sent in time): such locks expire at their ttl.
    let longest_ttl = Duration::from_secs(4);
    let to_release = acquire_for(&client, "frozen-release", longest_ttl)
        .await
        .expect("acquire");
    let waiter = spawn_acquire(client.lock("frozen-guard").wait(Duration::from_secs(20)));
    waiter_subscribed(&client).await;
    t.ops(4);

    server.pause();
    let paused_at = Instant::now();
    t.faults(1);

    // Every caller fails with a timeout instead of hanging, on either acquire path (odd callers
    // take the fenced acquire script, even ones the plain SET pipeline).
    let mut calls = Vec::new();
    for i in 0..callers {
        let lock = client
            .lock(format!("frozen-new-{i}"))
            .ttl(Duration::from_secs(2))
            .fenced(i % 2 == 1);
        calls.push(tokio::spawn(async move {
            let started = Instant::now();
            let result = lock.acquire().await.map(|_| ());
            (result, started.elapsed())
        }));
    }
    let release = tokio::spawn(async move {
        let started = Instant::now();
        (to_release.release().await, started.elapsed())
    });
    let bound = frozen_bound();
    let mut slowest = Duration::ZERO;
    for call in calls {
        let (result, took) = call.await.expect("caller task");
        slowest = slowest.max(took);
        t.ops(1);
        match result {
            Err(e @ Error::Timeout { .. }) => {
                t.check(e.to_string().contains("frozen-new-"), || {
                    format!("timeout error does not name the lock: {e}")
                });
            }
            other => t.violation(format!(
                "acquire against a frozen server returned {other:?}, not Err(Timeout)"
            )),
        }
        t.check(took <= bound, || {
            format!(
                "acquire against a frozen server took {} ms (bound {} ms)",
                ms(took),
                ms(bound)
            )
        });
    }
    let (released, took) = release.await.expect("release task");
    t.ops(1);
    slowest = slowest.max(took);
    t.check(matches!(released, Err(Error::Timeout { .. })), || {
        format!("release against a frozen server returned {released:?}, not Err(Timeout)")
    });
    t.check(took <= bound, || {
        format!(
            "release against a frozen server took {} ms (bound {} ms)",
            ms(took),
            ms(bound)
        )
    });

    // Renewed locks are reported lost once their lease can no longer be guaranteed.
    let lost = tokio::time::timeout(ttl * 3, guard.lost()).await;
    let lost_at = Instant::now();
    let deadline = guard.guaranteed_until();
    match lost {
        Ok(reason) => {
            t.check(reason == LossReason::Unreachable, || {
                format!("guard lost with {reason:?}, expected Unreachable")
            });
            t.check(lost_at <= deadline + Duration::from_millis(150), || {
                format!(
                    "loss reported {} ms after the guaranteed deadline",
                    ms(lost_at - deadline)
                )
            });
            t.check(lost_at + Duration::from_millis(5) >= deadline, || {
                format!(
                    "loss reported {} ms before the guaranteed deadline",
                    ms(deadline - lost_at)
                )
            });
        }
        Err(_) => t.violation(format!(
            "renewed guard not reported lost {} ms into the freeze",
            ms(ttl * 3)
        )),
    }
    match tokio::time::timeout(ttl * 3, body).await {
        Ok(Ok(Err(Error::Lost {
            reason: LossReason::Unreachable,
            ..
        }))) => {}
        Ok(other) => t.violation(format!(
            "run under a frozen server returned {other:?}, expected Err(Lost(Unreachable))"
        )),
        Err(_) => t.violation("the body under run was not cancelled during the freeze".to_owned()),
    }
    t.ops(2);
    let frozen_for = paused_at.elapsed();
    server.resume();

    // Works again with the same client.
    let (after, attempts) =
        acquire_when_back(&client, "frozen-after", "acquire after SIGCONT").await;
    t.ops(attempts);
    t.check(attempts == 1, || {
        format!("{attempts} attempts to acquire after SIGCONT (expected the first to work)")
    });
    after.release().await.expect("release after SIGCONT");
    drop(guard);
    // The waiter either gave up with a timeout during the freeze or got the lock afterwards.
    let (waited, done_at) = waiter.await.expect("waiter task");
    t.ops(1);
    match waited {
        Ok(g) => {
            t.check(done_at > paused_at + frozen_for, || {
                "the waiter got the lock during the freeze".to_owned()
            });
            g.release().await.expect("release");
        }
        Err(e) => {
            t.check(e.is_transient(), || {
                format!("the waiter failed with a non-transient error: {e}")
            });
        }
    }
    // At rest: no lock left, no background work, no renewal.
    testkit::eventually(Duration::from_secs(10), "client at rest", || {
        let client = client.clone();
        async move { (client.background_tasks() == 0 && client.renewing() == 0).then_some(()) }
    })
    .await;
    // No guard is left and the client is at rest: nothing may stay held once Redis has run
    // the commands queued during the freeze (each cleanup after the command it cleans up).
    let ghosts = lock_keys(&mut conn).await;
    t.check(ghosts.is_empty(), || {
        format!("after SIGCONT, locks held by nobody (until their ttl): {ghosts:?}")
    });
    let left = no_lock_left(&conn, longest_ttl + Duration::from_secs(2)).await;
    t.check(left.is_empty(), || format!("lock keys left: {left:?}"));
    t.note(format!(
        "response timeout {} ms: slowest failing call {} ms (bound {} ms); frozen {} ms",
        ms(RESPONSE_TIMEOUT),
        ms(slowest),
        ms(bound),
        ms(frozen_for)
    ));
}

async fn run_restarted(t: Arc<Tally>, rounds: u64) {
    let mut server = RedisServer::start();
    let client = fast_client(&server.url()).await;
    let other = fast_client(&server.url()).await;
    let ttl = Duration::from_secs(1);
    let mut slowest = Duration::ZERO;
    let mut attempts_after = 0;
    for round in 0..rounds {
        let held = acquire_renewed(&client, "restart-held", ttl)
            .await
            .expect("acquire");
        let token_before = token_of(&held, "the renewed lock held before the restart");
        // A waiter is subscribed while the server dies (its subscriber connection must recover).
        let blocker = acquire_for(&other, "restart-wait", Duration::from_secs(30))
            .await
            .expect("acquire");
        // A waiter that got the lock lets it go before its task ends (a dropped guard's release
        // would run in the background, and the next round's holder could find it still held).
        let waiter = tokio::spawn({
            let lock = client.lock("restart-wait").wait(Duration::from_secs(20));
            async move { lock.acquire().await?.release().await }
        });
        waiter_subscribed(&client).await;
        t.ops(3);

        server.kill();
        t.faults(1);
        for i in 0..5 {
            let name = format!("restart-new-{i}");
            let started = Instant::now();
            // Both acquire paths fail the same way (odd ones fenced).
            let result = client
                .lock(name.as_str())
                .fenced(i % 2 == 1)
                .acquire()
                .await;
            let took = started.elapsed();
            slowest = slowest.max(took);
            t.ops(1);
            match result {
                Err(e) => {
                    t.check(e.is_transient(), || {
                        format!("round {round}: outage error is not transient: {e}")
                    });
                    t.check(e.to_string().contains(&name), || {
                        format!("round {round}: outage error does not name the lock: {e}")
                    });
                }
                Ok(_) => t.violation(format!(
                    "round {round}: acquire succeeded while Redis was down"
                )),
            }
            t.check(took <= frozen_bound(), || {
                format!(
                    "round {round}: failing acquire took {} ms during the outage",
                    ms(took)
                )
            });
        }
        // The renewed lock cannot be guaranteed any more.
        match tokio::time::timeout(ttl * 3, held.lost()).await {
            Ok(reason) => t.check(
                matches!(reason, LossReason::Unreachable | LossReason::Expired),
                || format!("round {round}: held lock lost with {reason:?}"),
            ),
            Err(_) => {
                t.violation(format!(
                    "round {round}: held lock not reported lost during the outage"
                ));
                false
            }
        };
        drop(blocker);
        server.restart();

        // Same client, no re-init.
        let (after, attempts) =
            acquire_when_back(&client, "restart-after", "acquire after restart").await;
        attempts_after = attempts_after.max(attempts);
        t.ops(attempts);
        // The restarted server lost the fence key: the token comes from its clock alone.
        let token_after = token_of(&after, "the lock taken after the restart");
        t.check(token_after > token_before, || {
            format!(
                "round {round}: token after restart {token_after} not above {token_before} (server clock)"
            )
        });
        after.release().await.expect("release after restart");
        // The waiter from before either failed during the outage or got the (now free) lock.
        match waiter.await.expect("waiter task") {
            Ok(()) => {}
            // Got the lock during the outage and found it gone when releasing it.
            Err(distlock::Error::NotOwner { .. } | distlock::Error::Lost { .. }) => {}
            Err(e) => {
                t.check(e.is_transient(), || {
                    format!("round {round}: waiter failed with {e}")
                });
            }
        }
        // Release notifications reach waiters again (subscriber connection recovered).
        let blocker = acquire_for(&other, "restart-wait-2", Duration::from_secs(30))
            .await
            .expect("acquire");
        let waiter = tokio::spawn({
            let lock = client.lock("restart-wait-2").wait(Duration::from_secs(20));
            async move { lock.acquire().await }
        });
        let subscribed = Instant::now() + Duration::from_secs(5);
        while client.waiting_channels() == 0 && !waiter.is_finished() && Instant::now() < subscribed
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if waiter.is_finished() || client.waiting_channels() == 0 {
            let early = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            t.violation(format!(
                "round {round}: the first waiting acquire after the restart failed: {early:?}"
            ));
            drop(held);
            continue;
        }
        let released_at = Instant::now();
        blocker.release().await.expect("release");
        match tokio::time::timeout(Duration::from_secs(5), waiter).await {
            Ok(Ok(Ok(g))) => {
                let woke = released_at.elapsed();
                t.check(woke <= Duration::from_secs(1), || {
                    format!(
                        "round {round}: waiter woke {} ms after the release",
                        ms(woke)
                    )
                });
                g.release().await.expect("release");
            }
            other => t.violation(format!("round {round}: waiter after restart: {other:?}")),
        }
        t.ops(4);
        drop(held);
    }
    t.note(format!(
        "slowest failing acquire during the outage {} ms; acquires needed after restart: at most {attempts_after}",
        ms(slowest)
    ));
}
