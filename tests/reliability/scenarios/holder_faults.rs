//! Scenarios 2 and 3: the holder process is killed (`SIGKILL`) or frozen (`SIGSTOP`) while it
//! holds a renewed lock.
//!
//! Killed: another process gets the lock once the lease runs out, within ttl + ε of the kill,
//! and never before the remaining lease (PTTL right after the kill) has passed.
//!
//! Paused past its ttl: another process takes the lock with a larger fencing token; when the
//! holder resumes, its body is cancelled with `Err(Lost)`, its guard reports the loss and its
//! release is refused (`Lost`: it knew of the loss already) and changes nothing, and a fenced
//! resource rejects the write it sends with its old token.
//!
//! Every lock here is taken with `fenced(true)` (protocol `d2` hands out fencing tokens only
//! then): the checks compare tokens.

use std::sync::Arc;
use std::time::Duration;

use distlock::{Config, Error};
use redis::AsyncCommands;
use testkit::RedisServer;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::common::{
    acquire_renewed, calm_client, lock_key, lock_state, lock_value, ms, redis_conn, spawn_acquire,
    token_of, FencedResource, Settings,
};
use crate::report::{Scenario, Tally};
use crate::worker::{field_u64, fields, Ctx, Worker};

/// Slack on "within ttl": scheduling and process teardown under a loaded machine.
const EPSILON: Duration = Duration::from_millis(500);

pub(crate) fn killed(s: &Settings, budget: Duration) -> Scenario {
    let title = "holder SIGKILLed while renewing";
    Scenario::repeated("2", title, s.pick(3, 10), budget, run_killed)
}

pub(crate) fn paused(s: &Settings, budget: Duration) -> Scenario {
    let title = "holder SIGSTOPped past its ttl, then resumed";
    Scenario::repeated("3", title, s.pick(2, 6), budget, run_paused)
}

async fn run_killed(t: Arc<Tally>, rounds: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let client = calm_client(&server.url()).await;
    let ttl = Duration::from_secs(1);
    let mut slowest = Duration::ZERO;
    for round in 0..rounds {
        let name = format!("killed-{round}");
        let mut holder = Worker::spawn(
            format!("holder-{round}"),
            "holder",
            &[
                ("url", server.url()),
                ("name", name.clone()),
                ("ttl_ms", ms(ttl).to_string()),
            ],
        );
        let acquired = holder.expect("ACQUIRED", Duration::from_secs(20)).await;
        let holder_token = field_u64(&acquired, "token");
        // The lock key's value is its owner (`d2:<owner>`).
        let owner = lock_value(&mut conn, &name)
            .await
            .expect("the holder's lock key");
        let waiter = spawn_acquire(
            client
                .lock(name.clone())
                .ttl(Duration::from_secs(5))
                .fenced(true)
                .wait(ttl * 20),
        );
        // Renewal keeps the lock past its ttl: four renewals are more than one ttl of holding.
        for _ in 0..4 {
            holder.expect("RENEWED", ttl * 2).await;
        }
        t.ops(4);
        t.check(!waiter.is_finished(), || {
            format!("round {round}: the waiter got the lock while the holder was renewing it")
        });
        let still = lock_value(&mut conn, &name).await;
        t.check(still.as_deref() == Some(owner.as_str()), || {
            format!("round {round}: the lock changed owner while the holder was renewing it")
        });

        let killed_at = Instant::now();
        holder.kill().await;
        t.faults(1);
        let pttl: i64 = conn.pttl(lock_key(&name)).await.expect("PTTL");
        let (result, acquired_at) = waiter.await.expect("waiter task");
        let guard = match result {
            Ok(guard) => guard,
            Err(e) => {
                t.violation(format!(
                    "round {round}: the waiter did not get the lock after the kill: {e}"
                ));
                continue;
            }
        };
        t.ops(2);
        let waited = acquired_at - killed_at;
        slowest = slowest.max(waited);
        // PTTL is in whole milliseconds and was read after the kill.
        let remaining = Duration::from_millis(pttl.max(0) as u64);
        t.check(waited + Duration::from_millis(2) >= remaining, || {
            format!(
                "round {round}: acquired {} ms after the kill, but the lease still had {pttl} ms",
                ms(waited)
            )
        });
        t.check(waited <= ttl + EPSILON, || {
            format!(
                "round {round}: acquired {} ms after the kill, more than ttl + ε = {} ms",
                ms(waited),
                ms(ttl + EPSILON)
            )
        });
        let token = token_of(&guard, "the waiter's guard");
        t.check(token > holder_token, || {
            format!("round {round}: token {token} not above the killed holder's {holder_token}")
        });
        if let Err(e) = guard.release().await {
            t.violation(format!("round {round}: release after takeover failed: {e}"));
        }
    }
    t.note(format!(
        "ttl {} ms; slowest takeover {} ms after SIGKILL (bound ttl + {} ms)",
        ms(ttl),
        ms(slowest),
        ms(EPSILON)
    ));
}

/// Worker role `holder`: takes a renewed lock, says each renewal, waits to be killed.
pub(crate) async fn holder_worker(ctx: Ctx) -> Result<(), String> {
    let client = Config::new(ctx.param("url"))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let ttl = Duration::from_millis(ctx.num("ttl_ms"));
    let guard = acquire_renewed(&client, ctx.param("name"), ttl)
        .await
        .map_err(|e| e.to_string())?;
    let token = guard
        .token()
        .ok_or("a lock taken with fenced(true) has no fencing token")?;
    ctx.say(format!("ACQUIRED token={token}"));
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut last = guard.guaranteed_until();
    let mut renewals = 0;
    loop {
        // A renewal shows only as a later `guaranteed_until`: look every few milliseconds.
        tokio::select! {
            reason = &mut lost => return Err(format!("lost the lock: {reason}")),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        let until = guard.guaranteed_until();
        if until > last {
            last = until;
            renewals += 1;
            ctx.say(format!("RENEWED n={renewals}"));
        }
    }
}

async fn run_paused(t: Arc<Tally>, rounds: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let client = Config::new(server.url())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect");
    let ttl = Duration::from_secs(1);
    let mut slowest_notice = Duration::ZERO;
    for round in 0..rounds {
        let (run_name, guard_name) = (
            format!("paused-run-{round}"),
            format!("paused-guard-{round}"),
        );
        let resource = FencedResource::new(&run_name);
        let mut holder = Worker::spawn(
            format!("paused-holder-{round}"),
            "paused-holder",
            &[
                ("url", server.url()),
                ("ttl_ms", ms(ttl).to_string()),
                ("run_name", run_name.clone()),
                ("guard_name", guard_name.clone()),
            ],
        );
        let holding = holder.expect("HOLDING", Duration::from_secs(20)).await;
        let (run_token, guard_token) = (
            field_u64(&holding, "run_token"),
            field_u64(&holding, "guard_token"),
        );
        t.ops(2);
        // The holder's first fenced write is in once it says HOLDING.
        t.check(resource.max_token(&mut conn).await == run_token, || {
            format!("round {round}: the holder's own write was not accepted")
        });

        holder.signal("STOP");
        let paused_at = Instant::now();
        t.faults(1);
        let pttl_run: i64 = conn.pttl(lock_key(&run_name)).await.expect("PTTL");
        let pttl_guard: i64 = conn.pttl(lock_key(&guard_name)).await.expect("PTTL");
        // Another process (this one) takes both locks once the frozen holder's leases run out.
        let take = |name: &str| {
            client
                .lock(name)
                .ttl(Duration::from_secs(10))
                .fenced(true)
                .wait(ttl * 10)
        };
        let new_run = take(&run_name)
            .acquire()
            .await
            .expect("take the run lock from the frozen holder");
        let taken_run_at = paused_at.elapsed();
        let new_guard = take(&guard_name)
            .acquire()
            .await
            .expect("take the guard lock from the frozen holder");
        let taken_guard_at = paused_at.elapsed();
        t.ops(2);
        for (what, pttl, taken_at) in [
            ("run", pttl_run, taken_run_at),
            ("guard", pttl_guard, taken_guard_at),
        ] {
            t.check(taken_at + Duration::from_millis(2) >= Duration::from_millis(pttl.max(0) as u64), || {
                format!("round {round}: {what} lock taken {} ms into the pause, lease had {pttl} ms", ms(taken_at))
            });
        }
        let (new_run_token, new_guard_token) = (
            token_of(&new_run, "the new run lock"),
            token_of(&new_guard, "the new guard lock"),
        );
        t.check(new_run_token > run_token && new_guard_token > guard_token, || {
            format!(
                "round {round}: new tokens {new_run_token}/{new_guard_token} not above the frozen holder's {run_token}/{guard_token}"
            )
        });
        t.check(
            resource.write(&mut conn, new_run_token, "new-holder").await,
            || format!("round {round}: the new holder's write was rejected"),
        );
        // Each lock's owner (its value) and last fencing token (its fence key).
        let run_state = lock_state(&mut conn, &run_name).await;
        let guard_state = lock_state(&mut conn, &guard_name).await;

        holder.signal("CONT");
        let resumed_at = Instant::now();
        let lost = holder.expect("RUN-LOST", Duration::from_secs(10)).await;
        let notice = resumed_at.elapsed();
        slowest_notice = slowest_notice.max(notice);
        t.check(notice <= Duration::from_secs(2), || {
            format!(
                "round {round}: the resumed holder noticed the loss only {} ms after SIGCONT",
                ms(notice)
            )
        });
        t.check(fields(&lost).get("cancelled") == Some(&"true"), || {
            format!("round {round}: the body was not cancelled: {lost}")
        });
        let stale = holder.expect("STALE-WRITE", Duration::from_secs(5)).await;
        t.check(fields(&stale).get("accepted") == Some(&"false"), || {
            format!("round {round}: the fenced resource accepted the stale holder's write: {stale}")
        });
        let guard_lost = holder.expect("GUARD-LOST", Duration::from_secs(5)).await;
        t.check(
            fields(&guard_lost).get("ensure_held") == Some(&"err"),
            || format!("round {round}: ensure_held() still succeeds after the loss: {guard_lost}"),
        );
        let release = holder.expect("GUARD-RELEASE", Duration::from_secs(5)).await;
        t.check(fields(&release).get("result") == Some(&"lost"), || {
            format!("round {round}: the stale guard's release was not refused with Lost: {release}")
        });
        holder.expect("QUIET", Duration::from_secs(10)).await;
        t.ops(3);

        // Nothing the resumed holder did (its release, its cleanup, its renewals) touched the
        // new holder's locks.
        t.check(lock_state(&mut conn, &run_name).await == run_state, || {
            format!("round {round}: the run lock changed after the stale holder resumed")
        });
        t.check(
            lock_state(&mut conn, &guard_name).await == guard_state,
            || format!("round {round}: the guard lock changed after the stale holder resumed"),
        );
        t.check(
            new_run.ensure_held().is_ok() && new_guard.ensure_held().is_ok(),
            || format!("round {round}: the new holder lost its locks"),
        );
        let log = resource.log(&mut conn).await;
        let first_new = log.iter().position(|(_, what)| what == "new-holder");
        let late_stale = first_new
            .map(|i| {
                log[i..]
                    .iter()
                    .filter(|(tok, _)| *tok != new_run_token)
                    .count()
            })
            .unwrap_or(0);
        t.check(first_new.is_some() && late_stale == 0, || {
            format!("round {round}: stale writes accepted after the new holder's: {log:?}")
        });
        t.check(log.windows(2).all(|w| w[0].0 <= w[1].0), || {
            format!("round {round}: accepted writes out of token order: {log:?}")
        });
        for guard in [new_run, new_guard] {
            if let Err(e) = guard.release().await {
                t.violation(format!(
                    "round {round}: release by the new holder failed: {e}"
                ));
            }
        }
        t.ops(2);
        let code = holder.exit().await;
        t.check(code == Some(0), || {
            format!("round {round}: paused holder exited with {code:?}")
        });
    }
    t.note(format!(
        "ttl {} ms; the resumed holder noticed the loss at most {} ms after SIGCONT",
        ms(ttl),
        ms(slowest_notice)
    ));
}

/// Worker role `paused-holder`: holds one lock through `run` (a body that keeps writing to the
/// fenced resource) and one through a guard, then reports what it sees after being resumed.
pub(crate) async fn paused_worker(mut ctx: Ctx) -> Result<(), String> {
    let url = ctx.param("url").to_owned();
    let ttl = Duration::from_millis(ctx.num("ttl_ms"));
    let run_name = ctx.param("run_name").to_owned();
    let client = Config::new(url.as_str())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut conn = redis_conn(&url).await?;
    let resource = Arc::new(FencedResource::new(&run_name));

    let guard = acquire_renewed(&client, ctx.param("guard_name"), ttl)
        .await
        .map_err(|e| e.to_string())?;
    let (started_tx, started_rx) = oneshot::channel();
    let body = {
        let resource = resource.clone();
        let mut conn = conn.clone();
        async move {
            let token = distlock::fencing_token()
                .expect("a body run under a fenced lock has a fencing token");
            resource.write(&mut conn, token, "holder-0").await;
            let _ = started_tx.send(token);
            let mut n = 0u64;
            loop {
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                resource
                    .write(&mut conn, token, &format!("holder-{n}"))
                    .await;
            }
        }
    };
    let run = tokio::spawn(
        client
            .lock(run_name.as_str())
            .ttl(ttl)
            .renew(true)
            .fenced(true)
            .run(body),
    );
    let run_token = started_rx
        .await
        .map_err(|_| "the body never started".to_owned())?;
    let guard_token = guard
        .token()
        .ok_or("a lock taken with fenced(true) has no fencing token")?;
    ctx.say(format!(
        "HOLDING run_token={run_token} guard_token={guard_token}"
    ));

    // ... SIGSTOP, another process takes the locks, SIGCONT ...
    match run.await.map_err(|e| e.to_string())? {
        Err(Error::Lost { reason, .. }) => {
            ctx.say(format!("RUN-LOST cancelled=true reason={reason:?}"))
        }
        Err(other) => ctx.say(format!("RUN-LOST cancelled=false error={other:?}")),
        Ok(()) => ctx.say("RUN-LOST cancelled=false body-finished"),
    }
    // A write that was already on its way when the loss was noticed: the resource must refuse it.
    let accepted = resource
        .write(&mut conn, run_token, "stale-after-loss")
        .await;
    ctx.say(format!("STALE-WRITE accepted={accepted}"));

    let reason = tokio::time::timeout(ttl * 5, guard.lost())
        .await
        .map_err(|_| "the guard never reported the loss".to_owned())?;
    let ensure = if guard.ensure_held().is_err() {
        "err"
    } else {
        "ok"
    };
    ctx.say(format!("GUARD-LOST reason={reason:?} ensure_held={ensure}"));
    let result = match guard.release().await {
        Err(Error::NotOwner { .. }) => "not-owner".to_owned(),
        Err(Error::Lost { .. }) => "lost".to_owned(),
        Ok(()) => "released".to_owned(),
        Err(other) => format!("error:{other:?}").replace(' ', "_"),
    };
    ctx.say(format!("GUARD-RELEASE result={result}"));
    // The run's guard was dropped on loss: its background release must finish (refused).
    let quiet_by = Instant::now() + Duration::from_secs(5);
    while client.background_tasks() > 0 && Instant::now() < quiet_by {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ctx.say(format!("QUIET background={}", client.background_tasks()));
    let _ = ctx.command().await;
    Ok(())
}
