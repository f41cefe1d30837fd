//! Scenario 9: a lock with a 1 s ttl held for 10 s through renewal.
//!
//! Another client probes it continuously and must always find it busy (and the key alive); a
//! third client waiting for it gets it right after the release (woken by the release), and
//! the prober's next attempt succeeds. The probes alternate between the two acquire paths of
//! protocol `d2` (the plain `SET NX PX GET` and the fenced script): both must find it busy.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use testkit::RedisServer;
use tokio::time::Instant;

use crate::common::{acquire_renewed, calls, calm_client, lock_key, ms, spawn_acquire, Settings};
use crate::report::{Scenario, Tally};

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let hold = Duration::from_secs(s.pick(10, 30));
    Scenario::new(
        "9",
        format!(
            "1 s ttl lock held {} s with renewal, probed continuously",
            hold.as_secs()
        ),
        budget,
        move |t| run(t, hold),
    )
}

async fn run(t: Arc<Tally>, hold: Duration) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let (holder, prober, waiting) = (
        calm_client(&server.url()).await,
        calm_client(&server.url()).await,
        calm_client(&server.url()).await,
    );
    let ttl = Duration::from_secs(1);
    let renewals_before = calls(&mut conn, "evalsha").await;
    let guard = acquire_renewed(&holder, "long", ttl)
        .await
        .expect("acquire");
    let acquired_at = Instant::now();
    let waiter = spawn_acquire(waiting.lock("long").wait(hold + Duration::from_secs(10)));

    let (mut probes, mut fenced_probes, mut busy, mut min_pttl) = (0u64, 0u64, 0u64, i64::MAX);
    while acquired_at.elapsed() < hold {
        probes += 1;
        let fenced = probes % 2 == 0;
        fenced_probes += u64::from(fenced);
        match prober.lock("long").fenced(fenced).acquire().await {
            Err(e) if e.is_busy() => busy += 1,
            Err(e) => t.violation(format!("probe failed with {e}")),
            Ok(g) => {
                t.violation(format!(
                    "the prober acquired the lock {} ms into the hold",
                    ms(acquired_at.elapsed())
                ));
                drop(g);
            }
        }
        let pttl: i64 = conn.pttl(lock_key("long")).await.expect("PTTL");
        min_pttl = min_pttl.min(pttl);
        t.check(pttl > 0, || {
            format!(
                "lock key gone or without ttl {} ms into the hold (PTTL {pttl})",
                ms(acquired_at.elapsed())
            )
        });
        // Pacing between probes, not synchronisation.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.ops(probes);
    t.check(!waiter.is_finished(), || {
        "the waiter got the lock during the hold".to_owned()
    });
    t.check(guard.lost_reason().is_none(), || {
        format!("the holder lost the lock: {:?}", guard.lost_reason())
    });
    t.check(holder.renewing() == 1, || {
        format!("{} leases renewing, expected 1", holder.renewing())
    });
    // Every EVALSHA during the hold was the (fenced) acquire, a fenced probe, or a renewal
    // (plain probes are a `SET`, no script).
    let renewals =
        (calls(&mut conn, "evalsha").await - renewals_before).saturating_sub(fenced_probes + 1);

    let released_at = Instant::now();
    let released = guard.release().await;
    t.check(released.is_ok(), || {
        format!("release after the long hold: {released:?}")
    });
    let (result, got_at) = waiter.await.expect("waiter");
    t.ops(2);
    match result {
        Ok(g) => {
            let after = got_at - released_at;
            t.check(after <= Duration::from_millis(500), || {
                format!("the waiter got the lock {} ms after the release", ms(after))
            });
            let released = g.release().await;
            t.check(released.is_ok(), || format!("waiter release: {released:?}"));
        }
        Err(e) => t.violation(format!(
            "the waiter did not get the lock after the release: {e}"
        )),
    }
    match prober.lock("long").acquire().await {
        Ok(g) => {
            let released = g.release().await;
            t.check(released.is_ok(), || format!("prober release: {released:?}"));
        }
        Err(e) => t.violation(format!(
            "the prober could not take the lock right after the release: {e}"
        )),
    }
    t.ops(2);
    t.note(format!(
        "{probes} probes ({fenced_probes} fenced; {busy} Busy); lowest PTTL seen {min_pttl} ms of {}; {renewals} renewals",
        ms(ttl)
    ));
}
