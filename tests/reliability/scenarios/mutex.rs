//! Scenario 1: mutual exclusion across processes.
//!
//! K worker processes × M tasks each run N critical sections through `#[distributed_lock]`.
//! A section increments a Redis counter with a deliberately non-atomic GET-then-SET and keeps
//! an occupancy count (INCR on entry, DECR on exit). Lost updates show in the counter, overlaps
//! in the occupancy, and the fencing tokens seen inside the sections must strictly increase:
//! the locks are taken fenced (`fenced` on the attribute, `.fenced(true)` on the manual path),
//! and a locked section that sees no token counts as a violation too.
//! The same workload without the lock (1c) must be caught by these checks, which shows they
//! are not blind.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use distlock::{distributed_lock, Config};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::RedisServer;

use crate::common::{lock_keys, pubsub_channels, redis_conn, Rng, Settings};
use crate::report::{Scenario, Tally};
use crate::worker::{field_u64, fields, Ctx, Worker};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `wait = "60s"`: busy callers wait for the release.
    Wait,
    /// No `wait`: the worker retries on `Busy` after a short random back-off.
    RetryOnBusy,
    /// No lock at all: the negative control.
    Unlocked,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Wait => "wait",
            Mode::RetryOnBusy => "retry",
            Mode::Unlocked => "unlocked",
        }
    }

    fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "wait" => Ok(Mode::Wait),
            "retry" => Ok(Mode::RetryOnBusy),
            "unlocked" => Ok(Mode::Unlocked),
            other => Err(format!("unknown mode `{other}`")),
        }
    }
}

pub(crate) fn scenario(s: &Settings, mode: Mode, id: &'static str, budget: Duration) -> Scenario {
    let (k, m, n) = match mode {
        Mode::Unlocked => (3, 4, 5),
        _ => s.pick((3, 4, 25), (4, 8, 100)),
    };
    let title = match mode {
        Mode::Wait => format!("mutual exclusion {k} procs x {m} tasks x {n} (wait)"),
        Mode::RetryOnBusy => {
            format!("mutual exclusion {k} procs x {m} tasks x {n} (retry on Busy)")
        }
        Mode::Unlocked => format!("negative control: same workload unlocked ({k}x{m}x{n})"),
    };
    let seed = s.seed;
    Scenario::new(id, title, budget, move |t| run(t, mode, k, m, n, seed))
}

struct DataKeys {
    counter: String,
    occupancy: String,
    last_token: String,
}

impl DataKeys {
    fn new(name: &str) -> Self {
        DataKeys {
            counter: format!("data:{name}:counter"),
            occupancy: format!("data:{name}:occupancy"),
            last_token: format!("data:{name}:last-token"),
        }
    }
}

async fn run(t: Arc<Tally>, mode: Mode, k: u64, m: u64, n: u64, seed: u64) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let name = "counter";
    let mut rng = Rng::new(seed);
    let mut workers: Vec<Worker> = (0..k)
        .map(|i| {
            Worker::spawn(
                format!("mutex-{i}"),
                "mutex",
                &[
                    ("url", server.url()),
                    ("name", name.to_owned()),
                    ("tasks", m.to_string()),
                    ("iters", n.to_string()),
                    ("mode", mode.as_str().to_owned()),
                    ("seed", rng.next_u64().to_string()),
                ],
            )
        })
        .collect();
    let mut paths = Vec::new();
    for w in &mut workers {
        let ready = w.expect("READY", Duration::from_secs(20)).await;
        paths.push(
            fields(&ready)
                .get("path")
                .copied()
                .unwrap_or("?")
                .to_owned(),
        );
    }
    paths.dedup();
    assert_eq!(
        paths.len(),
        1,
        "workers disagree on the lock path: {paths:?}"
    );
    let path = paths.pop().unwrap_or_default();
    match path.as_str() {
        "macro" => t.note("locked through #[distributed_lock] (the macro expands and locks)"),
        "manual" => t.note("#[distributed_lock] does not lock yet: fell back to lock(..).run(..)"),
        _ => {}
    }
    // Start together: every worker is connected before anyone takes the lock.
    for w in &mut workers {
        w.send("GO").await;
    }
    let (mut sections, mut max_occupancy, mut busy, mut errors) = (0, 0, 0, 0);
    let (mut token_violations, mut no_token) = (0, 0);
    for w in &mut workers {
        let done = w.expect("DONE", Duration::from_secs(240)).await;
        sections += field_u64(&done, "sections");
        max_occupancy = max_occupancy.max(field_u64(&done, "max_occupancy"));
        busy += field_u64(&done, "busy");
        errors += field_u64(&done, "errors");
        token_violations += field_u64(&done, "token_violations");
        no_token += field_u64(&done, "no_token");
        if field_u64(&done, "errors") > 0 {
            t.note(format!("{}: {}", w.name(), w.stderr_tail()));
        }
    }
    for w in &mut workers {
        let code = w.finish(Duration::from_secs(10)).await;
        t.check(code == Some(0), || {
            format!("worker {} exited with {code:?}", w.name())
        });
    }
    let keys = DataKeys::new(name);
    let counter: Option<u64> = conn.get(&keys.counter).await.expect("GET counter");
    let counter = counter.unwrap_or(0);
    let occupancy: Option<i64> = conn.get(&keys.occupancy).await.expect("GET occupancy");
    let expected = k * m * n;
    t.ops(sections + busy);
    t.note(format!(
        "{sections} critical sections, {busy} Busy replies retried, counter {counter}/{expected}, max occupancy {max_occupancy}"
    ));

    if mode == Mode::Unlocked {
        // The control must be caught, or the checks above prove nothing.
        t.check(counter < expected || max_occupancy > 1, || {
            format!("the unlocked control was not caught (counter {counter}/{expected}, max occupancy {max_occupancy}): the checks are blind")
        });
        return;
    }
    t.check(errors == 0, || {
        format!("{errors} critical sections failed with an error")
    });
    t.check(sections == expected, || {
        format!("{sections} sections ran, expected {expected}")
    });
    t.check(counter == expected, || {
        format!("counter is {counter}, expected {expected}: lost updates")
    });
    t.check(max_occupancy <= 1, || {
        format!("occupancy reached {max_occupancy}: two holders at once")
    });
    t.check(occupancy.unwrap_or(0) == 0, || {
        format!("occupancy left at {occupancy:?}")
    });
    t.check(token_violations == 0, || {
        format!("{token_violations} sections saw a fencing token not above the previous section's")
    });
    t.check(no_token == 0, || {
        format!("{no_token} sections under a fenced lock saw no fencing token")
    });
    let left = lock_keys(&mut conn).await;
    t.check(left.is_empty(), || format!("lock keys left: {left:?}"));
    let channels = pubsub_channels(&mut conn).await;
    t.check(channels.is_empty(), || {
        format!("channels left: {channels:?}")
    });
}

/// What a worker task reports about one critical section.
struct Section {
    occupancy: i64,
    /// The section saw a fencing token.
    had_token: bool,
    /// Its token (if any) was above the previous section's.
    token_ok: bool,
}

/// The error type of the locked functions.
#[derive(Debug)]
pub(crate) enum SectionError {
    Lock(distlock::Error),
    Redis(redis::RedisError),
}

impl From<distlock::Error> for SectionError {
    fn from(e: distlock::Error) -> Self {
        SectionError::Lock(e)
    }
}

impl From<redis::RedisError> for SectionError {
    fn from(e: redis::RedisError) -> Self {
        SectionError::Redis(e)
    }
}

impl fmt::Display for SectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SectionError::Lock(e) => write!(f, "lock: {e}"),
            SectionError::Redis(e) => write!(f, "redis: {e}"),
        }
    }
}

/// Probe: true if `#[distributed_lock]` really runs the body under the lock (the lock key
/// exists and the body of this `fenced` lock sees a fencing token), false if the attribute
/// passed the fn through.
#[distributed_lock(key = "probe:<name>", ttl = "5s", fenced)]
pub(crate) async fn macro_probe(
    name: &str,
    mut conn: MultiplexedConnection,
) -> Result<bool, SectionError> {
    let held: bool = conn
        .exists(crate::common::lock_key(&format!("probe:{name}")))
        .await?;
    Ok(held && distlock::fencing_token().is_some())
}

#[distributed_lock(key = "mutex:<name>", ttl = "10s", renew, wait = "60s", fenced)]
async fn section_waiting(
    name: &str,
    conn: MultiplexedConnection,
    pause: bool,
) -> Result<Section, SectionError> {
    critical_section(name, conn, pause).await
}

#[distributed_lock(key = "mutex:<name>", ttl = "10s", renew, fenced)]
async fn section_or_busy(
    name: &str,
    conn: MultiplexedConnection,
    pause: bool,
) -> Result<Section, SectionError> {
    critical_section(name, conn, pause).await
}

/// The same sections through the manual API (what the attribute calls), for when the
/// attribute does not expand yet.
async fn section_manual(
    name: &str,
    conn: MultiplexedConnection,
    pause: bool,
    wait: bool,
) -> Result<Section, SectionError> {
    let mut builder = distlock::lock(format!("mutex:{name}"))
        .ttl(Duration::from_secs(10))
        .renew(true)
        .fenced(true);
    if wait {
        builder = builder.wait(Duration::from_secs(60));
    }
    match builder.run(critical_section(name, conn, pause)).await {
        Ok(result) => result,
        Err(error) => Err(error.into()),
    }
}

async fn critical_section(
    name: &str,
    mut conn: MultiplexedConnection,
    pause: bool,
) -> Result<Section, SectionError> {
    let keys = DataKeys::new(name);
    let token = distlock::fencing_token();
    let occupancy: i64 = conn.incr(&keys.occupancy, 1).await?;
    let value: Option<u64> = conn.get(&keys.counter).await?;
    // Widen the window between the read and the write.
    if pause {
        tokio::time::sleep(Duration::from_millis(1)).await;
    } else {
        tokio::task::yield_now().await;
    }
    let () = conn.set(&keys.counter, value.unwrap_or(0) + 1).await?;
    let mut token_ok = true;
    if let Some(token) = token {
        let last: Option<u64> = conn.get(&keys.last_token).await?;
        token_ok = last.is_none_or(|last| token > last);
        let () = conn.set(&keys.last_token, token).await?;
    }
    let _: i64 = conn.decr(&keys.occupancy, 1).await?;
    Ok(Section {
        occupancy,
        had_token: token.is_some(),
        token_ok,
    })
}

#[derive(Default)]
struct TaskStats {
    sections: u64,
    max_occupancy: i64,
    busy: u64,
    errors: u64,
    token_violations: u64,
    /// Locked sections that saw no fencing token (every lock here is fenced).
    no_token: u64,
}

/// Worker role `mutex`.
pub(crate) async fn worker(mut ctx: Ctx) -> Result<(), String> {
    let url = ctx.param("url").to_owned();
    let name: Arc<str> = ctx.param("name").into();
    let tasks = ctx.num("tasks");
    let iters = ctx.num("iters");
    let mode = Mode::parse(ctx.param("mode"))?;
    let mut rng = Rng::new(ctx.num("seed"));
    let conn = redis_conn(&url).await?;
    let mut client = None;
    let path = if mode == Mode::Unlocked {
        "none"
    } else {
        client = Some(
            Config::new(url.as_str())
                .install()
                .await
                .map_err(|e| e.to_string())?,
        );
        let probe = format!("{name}-{}", std::process::id());
        match macro_probe(&probe, conn.clone()).await {
            Ok(true) => "macro",
            Ok(false) => "manual",
            Err(e) => return Err(format!("macro probe failed: {e}")),
        }
    };
    ctx.say(format!("READY path={path}"));
    let go = ctx.command().await;
    if go != "GO" {
        return Err(format!("expected GO, got `{go}`"));
    }
    let use_macro = path == "macro";
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let conn = conn.clone();
        let name = name.clone();
        let mut rng = rng.fork();
        handles.push(tokio::spawn(async move {
            let mut stats = TaskStats::default();
            for _ in 0..iters {
                loop {
                    let pause = rng.percent(50);
                    let result = match (mode, use_macro) {
                        (Mode::Unlocked, _) => critical_section(&name, conn.clone(), pause).await,
                        (Mode::Wait, true) => section_waiting(&name, conn.clone(), pause).await,
                        (Mode::RetryOnBusy, true) => {
                            section_or_busy(&name, conn.clone(), pause).await
                        }
                        (Mode::Wait, false) => {
                            section_manual(&name, conn.clone(), pause, true).await
                        }
                        (Mode::RetryOnBusy, false) => {
                            section_manual(&name, conn.clone(), pause, false).await
                        }
                    };
                    match result {
                        Ok(section) => {
                            stats.sections += 1;
                            stats.max_occupancy = stats.max_occupancy.max(section.occupancy);
                            if !section.token_ok {
                                stats.token_violations += 1;
                            }
                            if mode != Mode::Unlocked && !section.had_token {
                                stats.no_token += 1;
                            }
                            break;
                        }
                        Err(SectionError::Lock(e)) if e.is_busy() && mode == Mode::RetryOnBusy => {
                            stats.busy += 1;
                            tokio::time::sleep(Duration::from_micros(rng.below(2000))).await;
                        }
                        Err(e) => {
                            eprintln!("critical section failed: {e}");
                            stats.errors += 1;
                            break;
                        }
                    }
                }
            }
            stats
        }));
    }
    let mut total = TaskStats::default();
    for h in handles {
        let s = h.await.map_err(|e| format!("task panicked: {e}"))?;
        total.sections += s.sections;
        total.max_occupancy = total.max_occupancy.max(s.max_occupancy);
        total.busy += s.busy;
        total.errors += s.errors;
        total.token_violations += s.token_violations;
        total.no_token += s.no_token;
    }
    // The last sections' releases were sent, not waited for: they reach Redis before this
    // process exits.
    if let Some(client) = &client {
        client.settle().await;
    }
    ctx.say(format!(
        "DONE sections={} max_occupancy={} busy={} errors={} token_violations={} no_token={}",
        total.sections,
        total.max_occupancy,
        total.busy,
        total.errors,
        total.token_violations,
        total.no_token
    ));
    Ok(())
}
