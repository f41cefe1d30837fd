//! Scenario 8: a cancellation storm.
//!
//! A worker process starts hundreds of concurrent acquires, `run` bodies and
//! `#[distributed_lock]` calls on a dozen names and drops each at a random point (after a
//! random number of polls, after a random time, or by aborting its task), and drops or
//! cancels releases too. The seeded RNG makes a run replayable (`RELIABILITY_SEED`).
//!
//! Afterwards the client must come to rest (`background_tasks`, `renewing` and
//! `waiting_channels` all zero), no lock key and no subscription may remain, and no renewal
//! or acquire traffic may continue (`INFO commandstats` unchanged over a quiet window while the
//! worker and its client stay alive). Meanwhile no two bodies may have run at once under one
//! name. Manual locks take either acquire path of protocol `d2` at random (the plain
//! `SET NX PX GET` pipeline or the fenced script), so cancellation hits both.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use distlock::{distributed_lock, Client, Config, LockBuilder};
use redis::AsyncCommands;
use testkit::RedisServer;

use super::mutex::{macro_probe, SectionError};
use crate::common::{calls, lock_keys, ms, no_channel_left, redis_conn, Rng, Settings};
use crate::report::{Scenario, Tally};
use crate::worker::{field_u64, fields, Ctx, Worker};

/// Names the storm contends on.
const NAMES: u64 = 12;

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let ops = s.pick(400, 4000);
    let seed = s.seed;
    Scenario::new(
        "8",
        format!("cancellation storm: {ops} acquires/calls dropped at random points"),
        budget,
        move |t| run(t, ops, seed),
    )
}

async fn run(t: Arc<Tally>, ops: u64, seed: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    t.note(format!("seed {seed} (RELIABILITY_SEED={seed} replays it)"));
    let mut worker = Worker::spawn(
        "storm",
        "storm",
        &[
            ("url", server.url()),
            ("ops", ops.to_string()),
            ("seed", seed.to_string()),
        ],
    );
    let ready = worker.expect("READY", Duration::from_secs(20)).await;
    if fields(&ready).get("path") != Some(&"macro") {
        t.note(
            "#[distributed_lock] does not lock yet: annotated calls fell back to lock(..).run(..)",
        );
    }
    worker.send("GO").await;
    let done = worker.expect("DONE", Duration::from_secs(120)).await;
    let (started, cut, acquired, overlaps, errors) = (
        field_u64(&done, "started"),
        field_u64(&done, "cut"),
        field_u64(&done, "acquired"),
        field_u64(&done, "overlaps"),
        field_u64(&done, "errors"),
    );
    t.ops(started);
    t.faults(cut);
    t.check(fields(&done).get("at_rest") == Some(&"true"), || {
        format!("the client did not come to rest: {done}")
    });
    t.check(overlaps == 0, || {
        format!("{overlaps} times two bodies ran at once under one name")
    });
    t.check(errors == 0, || {
        format!(
            "{errors} calls failed with an unexpected error: {}",
            worker.stderr_tail()
        )
    });

    let left = lock_keys(&mut conn).await;
    let mut held = Vec::new();
    for key in &left {
        // The owner (its counter orders it among the storm's acquires) and the lease left
        // say which call left it.
        let owner: Option<String> = conn.get(key).await.unwrap_or(None);
        let pttl: i64 = conn.pttl(key).await.unwrap_or(-3);
        held.push(format!("{key} = {owner:?} (pttl {pttl} ms)"));
    }
    t.check(left.is_empty(), || {
        format!("lock keys left after the storm: {held:?}")
    });
    let channels = no_channel_left(&conn, Duration::from_secs(3)).await;
    t.check(channels.is_empty(), || {
        format!("subscriptions left: {channels:?}")
    });

    // A quiet window while the worker and its client stay alive: longer than four renewal
    // intervals of the shortest renewed ttl in the storm (2 s / 3).
    let quiet = Duration::from_millis(2800);
    // `evalsha`: renewals, releases and fenced acquires; `set`: plain acquires.
    let before = (
        calls(&mut conn, "evalsha").await,
        calls(&mut conn, "set").await,
        calls(&mut conn, "subscribe").await,
        calls(&mut conn, "unsubscribe").await,
    );
    tokio::time::sleep(quiet).await;
    let after = (
        calls(&mut conn, "evalsha").await,
        calls(&mut conn, "set").await,
        calls(&mut conn, "subscribe").await,
        calls(&mut conn, "unsubscribe").await,
    );
    t.check(before == after, || {
        format!("traffic at rest over {} ms: evalsha/set/subscribe/unsubscribe calls {before:?} -> {after:?}", ms(quiet))
    });
    worker.send("CHECK").await;
    let rest = worker.expect("AT-REST", Duration::from_secs(5)).await;
    for key in ["background", "renewing", "waiting"] {
        t.check(field_u64(&rest, key) == 0, || {
            format!("after the quiet window: {rest}")
        });
    }
    let code = worker.exit().await;
    t.check(code == Some(0), || {
        format!("storm worker exited with {code:?}")
    });
    t.note(format!(
        "{started} started, {cut} dropped mid-flight, {acquired} bodies/guards got the lock; quiet window {} ms",
        ms(quiet)
    ));
}

/// Counts how many bodies hold each name right now.
#[derive(Default)]
struct Occupancy {
    slots: Vec<AtomicI64>,
    overlaps: AtomicU64,
    acquired: AtomicU64,
}

struct Occupant<'a> {
    slot: &'a AtomicI64,
}

impl Occupancy {
    fn new() -> Self {
        Occupancy {
            slots: (0..NAMES).map(|_| AtomicI64::new(0)).collect(),
            ..Default::default()
        }
    }

    /// Called right after the lock is taken; the occupant leaves before the lock is released.
    fn enter(&self, index: u64) -> Occupant<'_> {
        let slot = &self.slots[index as usize];
        if slot.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.acquired.fetch_add(1, Ordering::Relaxed);
        Occupant { slot }
    }
}

impl Drop for Occupant<'_> {
    fn drop(&mut self) {
        self.slot.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Polls `inner` at most `polls` times: a cancellation at a chosen await point.
struct Cut<F> {
    inner: Pin<Box<F>>,
    polls_left: u32,
}

impl<F: Future> Future for Cut<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending if self.polls_left <= 1 => Poll::Ready(None),
            Poll::Pending => {
                self.polls_left -= 1;
                Poll::Pending
            }
        }
    }
}

/// Where a future is dropped.
#[derive(Debug, Clone, Copy)]
enum CutAt {
    Never,
    Polls(u32),
    After(Duration),
}

impl CutAt {
    fn random(rng: &mut Rng) -> CutAt {
        match rng.below(10) {
            0..=1 => CutAt::Never,
            2..=5 => CutAt::Polls(1 + rng.below(6) as u32),
            _ => CutAt::After(Duration::from_micros(rng.below(8000))),
        }
    }

    /// `Some(output)` if `fut` finished, `None` if it was dropped first.
    async fn apply<F: Future>(self, fut: F) -> Option<F::Output> {
        match self {
            CutAt::Never => Some(fut.await),
            CutAt::Polls(n) => {
                Cut {
                    inner: Box::pin(fut),
                    polls_left: n,
                }
                .await
            }
            CutAt::After(d) => tokio::time::timeout(d, fut).await.ok(),
        }
    }
}

/// What runs under a storm lock: it occupies the name's slot for `hold`.
struct Body {
    index: u64,
    hold: Duration,
    occ: Arc<Occupancy>,
}

impl Body {
    async fn run(self) -> Result<(), SectionError> {
        let _inside = self.occ.enter(self.index);
        tokio::time::sleep(self.hold).await;
        Ok(())
    }
}

#[distributed_lock(key = "storm:<name>", ttl = "5s", wait = "300ms")]
async fn annotated_waiting(name: &str, body: Body) -> Result<(), SectionError> {
    body.run().await
}

// Fenced: the attribute's fenced acquire (the script) is cut mid-flight too.
#[distributed_lock(key = "storm:<name>", ttl = "2s", renew, wait = "300ms", fenced)]
async fn annotated_renewed(name: &str, body: Body) -> Result<(), SectionError> {
    body.run().await
}

#[distributed_lock(key = "storm:<name>", ttl = "5s")]
async fn annotated_or_busy(name: &str, body: Body) -> Result<(), SectionError> {
    body.run().await
}

/// A manual lock on a storm name, with the leases of the annotated functions: renewed ones
/// are 2 s, which sizes the quiet window that checks renewal has stopped. `fenced`: the fenced
/// acquire script instead of the plain `SET NX PX GET`.
fn storm_lock(client: &Client, name: &str, renew: bool, fenced: bool) -> LockBuilder {
    let ttl = if renew {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    };
    client
        .lock(format!("storm:{name}"))
        .ttl(ttl)
        .renew(renew)
        .fenced(fenced)
}

#[derive(Default)]
struct Stats {
    started: AtomicU64,
    cut: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    fn outcome<T>(&self, result: Option<Result<T, SectionError>>) {
        match result {
            None => {
                self.cut.fetch_add(1, Ordering::Relaxed);
            }
            Some(Ok(_)) => {}
            Some(Err(SectionError::Lock(e))) if e.is_busy() => {}
            Some(Err(e)) => {
                eprintln!("storm call failed: {e}");
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// One storm task: a random kind of call, dropped at a random point.
async fn storm_task(
    client: Client,
    mut rng: Rng,
    use_macro: bool,
    occ: Arc<Occupancy>,
    stats: Arc<Stats>,
) {
    stats.started.fetch_add(1, Ordering::Relaxed);
    let index = rng.below(NAMES);
    let name = format!("n{index}");
    let hold = Duration::from_micros(rng.below(10_000));
    let body = Body { index, hold, occ };
    let cut = CutAt::random(&mut rng);
    let kind = if use_macro {
        rng.below(5)
    } else {
        rng.below(2)
    };
    match kind {
        // The manual API: acquire (maybe waiting, maybe renewed), hold, then release, drop the
        // guard, or drop the release future mid-flight.
        0 => {
            let renew = rng.percent(40);
            let mut lock = storm_lock(&client, &name, renew, rng.percent(50));
            if rng.percent(60) {
                lock = lock.wait(rng.millis(0, 300));
            }
            let finish = rng.below(3);
            let release_cut = CutAt::random(&mut rng);
            let result = cut
                .apply(async {
                    let guard = lock.acquire().await?;
                    body.run().await?;
                    match finish {
                        0 => guard.release().await?,
                        1 => drop(guard),
                        _ => {
                            let _ = release_cut.apply(guard.release()).await;
                        }
                    }
                    Ok::<(), SectionError>(())
                })
                .await;
            stats.outcome(result);
        }
        // A body under `run`, with or without renewal.
        1 => {
            let renew = rng.percent(50);
            let lock = storm_lock(&client, &name, renew, rng.percent(50)).wait(rng.millis(0, 300));
            let result = cut.apply(lock.run(body.run())).await;
            stats.outcome(result.map(|r| r.map_err(SectionError::from).and_then(|inner| inner)));
        }
        2 => stats.outcome(cut.apply(annotated_waiting(&name, body)).await),
        3 => stats.outcome(cut.apply(annotated_renewed(&name, body)).await),
        _ => stats.outcome(cut.apply(annotated_or_busy(&name, body)).await),
    }
}

/// Worker role `storm`.
pub(crate) async fn worker(mut ctx: Ctx) -> Result<(), String> {
    let url = ctx.param("url").to_owned();
    let ops = ctx.num("ops");
    let mut rng = Rng::new(ctx.num("seed"));
    let client = Config::new(url.as_str())
        .install()
        .await
        .map_err(|e| e.to_string())?;
    let conn = redis_conn(&url).await?;
    let probe = format!("storm-{}", std::process::id());
    let use_macro = macro_probe(&probe, conn).await.map_err(|e| e.to_string())?;
    ctx.say(format!(
        "READY path={}",
        if use_macro { "macro" } else { "manual" }
    ));
    if ctx.command().await != "GO" {
        return Err("expected GO".to_owned());
    }
    let occ = Arc::new(Occupancy::new());
    let stats = Arc::new(Stats::default());
    let mut tasks = Vec::new();
    let mut aborted = 0;
    for _ in 0..ops {
        let task = tokio::spawn(storm_task(
            client.clone(),
            rng.fork(),
            use_macro,
            occ.clone(),
            stats.clone(),
        ));
        // Some tasks are aborted from outside at a random moment instead.
        if rng.percent(15) {
            aborted += 1;
            let abort = task.abort_handle();
            let after = Duration::from_micros(rng.below(5000));
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                abort.abort();
            });
        }
        tasks.push(task);
    }
    let mut aborted_mid_flight = 0;
    for task in tasks {
        if let Err(e) = task.await {
            if e.is_cancelled() {
                aborted_mid_flight += 1;
            } else {
                return Err(format!("storm task panicked: {e}"));
            }
        }
    }
    let rest_by = tokio::time::Instant::now() + Duration::from_secs(10);
    let at_rest =
        |c: &Client| c.background_tasks() == 0 && c.renewing() == 0 && c.waiting_channels() == 0;
    while !at_rest(&client) && tokio::time::Instant::now() < rest_by {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ctx.say(format!(
        "DONE started={} cut={} acquired={} overlaps={} errors={} aborted={aborted} at_rest={} background={} renewing={} waiting={}",
        ops,
        stats.cut.load(Ordering::Relaxed) + aborted_mid_flight,
        occ.acquired.load(Ordering::Relaxed),
        occ.overlaps.load(Ordering::Relaxed),
        stats.errors.load(Ordering::Relaxed),
        at_rest(&client),
        client.background_tasks(),
        client.renewing(),
        client.waiting_channels()
    ));
    // The suite watches Redis over a quiet window while this client stays alive.
    let _ = ctx.command().await;
    ctx.say(format!(
        "AT-REST background={} renewing={} waiting={}",
        client.background_tasks(),
        client.renewing(),
        client.waiting_channels()
    ));
    let _ = ctx.command().await;
    Ok(())
}
