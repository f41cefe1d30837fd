//! What silently voids a server's locks, noticed (`Config::server_check`): a step of its wall
//! clock, and a restart.
//!
//! Redis keeps a key's expiry as a wall-clock date (it must survive a restart), so when a
//! server's clock steps forward (`date -s`, an NTP step after a long drift, a VM resumed from a
//! snapshot) every lock on it expires that much earlier than its holder was promised, at once
//! if the step is larger than the time left: another client can take it while the holder still
//! believes. A server that restarts comes back without the locks taken since its last snapshot
//! (all of them without persistence). No client can prevent either; it can notice and tell the
//! holder. A task reads each server's clock (`TIME`) and the id of its run (`run_id` of `INFO
//! server`, new at every start) every period:
//!
//! * a server clock that moved further than this machine's monotonic clock between two reads,
//!   by more than the reads' own uncertainty (the two round trips) plus [`STEP_TOLERANCE`], has
//!   stepped;
//! * a run id that changed means the server restarted (or, behind one address, another server
//!   answers now).
//!
//! Each counts, like a master switch, in the epoch the watchdog confirms every lease against
//! (see `watchdog`): a lease reply that crossed it counts for nothing, and every lease is
//! confirmed on the server at once, so a holder whose lock is gone is told within about one
//! period. A step back
//! makes keys outlive their leases, which is safe, and counts for nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::Value;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::background::Background;
use crate::deploy::backend::Link;
use crate::deploy::connection::Connection;
use crate::metrics::{self, ServerEvent};

#[cfg(feature = "testing")]
use super::check_faults;

/// How much further than this machine's clock a server's clock may move between two reads
/// (beyond their round trips) before it counts as a step: far above the drift of a clock NTP
/// slews (at most 0.5 ms per second), far below a ttl.
pub(crate) const STEP_TOLERANCE: Duration = Duration::from_millis(20);

/// The server clock steps and restarts seen so far, and the task that checks.
pub(crate) struct ServerCheck {
    steps: Arc<Steps>,
    task: Option<AbortHandle>,
}

struct Steps {
    seen: AtomicU64,
    announce: watch::Sender<u64>,
}

impl ServerCheck {
    /// Checks `servers` (each connection: one server, or every master of a cluster) every
    /// `period` on the client's runtime, each check bounded by `timeout`; `None`: never (no
    /// steps are seen).
    pub(crate) fn start(
        servers: Vec<Arc<Connection>>,
        period: Option<Duration>,
        timeout: Duration,
        background: &Background,
    ) -> ServerCheck {
        let steps = Arc::new(Steps {
            seen: AtomicU64::new(0),
            announce: watch::channel(0).0,
        });
        let task = period.map(|period| {
            metrics::server_events_watched(&[ServerEvent::ClockStep, ServerEvent::Restart]);
            // The testing kit's faults made from now on are this client's to see.
            #[cfg(feature = "testing")]
            let since = check_faults::now();
            #[cfg(not(feature = "testing"))]
            let since = ();
            let task = watch_clocks(servers, (period, timeout), steps.clone(), since);
            background.spawn_task(task)
        });
        ServerCheck { steps, task }
    }

    /// True if the clocks are read.
    pub(crate) fn is_on(&self) -> bool {
        self.task.is_some()
    }

    /// The steps and restarts seen so far.
    pub(crate) fn steps(&self) -> u64 {
        self.steps.seen.load(Ordering::Acquire)
    }

    /// Woken at every step or restart seen.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.steps.announce.subscribe()
    }
}

impl Drop for ServerCheck {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// One read of a server's clock: what it said, and when on this machine's clock (the middle
/// of the round trip), give or take half the round trip; with the server's run id.
#[derive(Clone)]
struct Reading {
    server_us: i64,
    at: Instant,
    rtt: Duration,
    run_id: Option<String>,
    /// What the testing kit showed of this server (`check_faults`).
    #[cfg(feature = "testing")]
    kit: check_faults::Shown,
}

/// What the testing kit had shown when a check started (`check_faults::now`; nothing without
/// the feature).
#[cfg(feature = "testing")]
type Since = u64;
#[cfg(not(feature = "testing"))]
type Since = ();

async fn watch_clocks(
    servers: Vec<Arc<Connection>>,
    (period, timeout): (Duration, Duration),
    steps: Arc<Steps>,
    since: Since,
) {
    // The last reading of each server (by connection and node address).
    let mut last: HashMap<(usize, String), Reading> = HashMap::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    #[cfg(feature = "testing")]
    let mut kit = check_faults::wakes();
    #[cfg(not(feature = "testing"))]
    let () = since;
    loop {
        #[cfg(not(feature = "testing"))]
        tick.tick().await;
        // A fault the testing kit made is read at once, not at the next tick.
        #[cfg(feature = "testing")]
        tokio::select! {
            _ = tick.tick() => {}
            _ = kit.changed() => {}
        }
        // All at once: a server that does not answer does not delay the others' readings.
        let reads = servers.iter().map(|server| {
            let (_, link) = server.current();
            tokio::time::timeout(timeout, read_clocks(link))
        });
        let all = futures_util::future::join_all(reads).await;
        for (i, read) in all.into_iter().enumerate() {
            let Ok(Ok(readings)) = read else {
                // Unreachable now: the next reading compares with the last one it has.
                continue;
            };
            for (node, reading) in readings {
                let before = last.insert((i, node.clone()), reading.clone());
                #[cfg(feature = "testing")]
                if kit_fault(&node, before.as_ref(), &reading, since) {
                    steps.count();
                }
                let Some(before) = before else {
                    continue;
                };
                if let Some(ahead) = stepped(&before, &reading) {
                    tracing::warn!(
                        node = %node,
                        ahead_ms = ahead.as_millis() as u64,
                        "a Redis server's clock stepped forward: its locks expire early; confirming every lease"
                    );
                    metrics::server_event(ServerEvent::ClockStep);
                    steps.count();
                } else if restarted(&before, &reading) {
                    tracing::warn!(
                        node = %node,
                        "a Redis server restarted: the locks it held may be gone; confirming every lease"
                    );
                    metrics::server_event(ServerEvent::Restart);
                    steps.count();
                }
            }
        }
    }
}

impl Steps {
    /// One more step or restart: every lease is confirmed.
    fn count(&self) {
        let seen = self.seen.fetch_add(1, Ordering::AcqRel) + 1;
        self.announce.send_replace(seen);
    }
}

/// True if the testing kit made a fault on the server since the `before` reading (or since
/// the check started, `since`, for its first reading) that the clock comparison does not count
/// by itself: a request to confirm every lease, or a step made before the first reading (with
/// no earlier reading, the comparison cannot see it; a real one would go unnoticed).
#[cfg(feature = "testing")]
fn kit_fault(node: &str, before: Option<&Reading>, after: &Reading, since: u64) -> bool {
    let (stepped, confirmed) = match before {
        // A later step is the comparison's to count.
        Some(before) => (false, after.kit.confirmed > before.kit.confirmed),
        None => (after.kit.stepped > since, after.kit.confirmed > since),
    };
    if stepped {
        tracing::warn!(
            node = %node,
            ahead_ms = after.kit.ahead_us / 1000,
            "a Redis server's clock stepped forward: its locks expire early; confirming every lease"
        );
        metrics::server_event(ServerEvent::ClockStep);
    } else if confirmed {
        tracing::debug!(node = %node, "the testing kit asks every lease confirmed");
    }
    stepped || confirmed
}

/// True if the two readings came from different runs of the server.
fn restarted(before: &Reading, after: &Reading) -> bool {
    matches!((&before.run_id, &after.run_id), (Some(a), Some(b)) if a != b)
}

/// How far the server's clock ran ahead of this machine's between two readings, if that is a
/// step (more than the readings' uncertainty and [`STEP_TOLERANCE`]).
fn stepped(before: &Reading, after: &Reading) -> Option<Duration> {
    let server = after.server_us.saturating_sub(before.server_us);
    let local = i64::try_from(after.at.duration_since(before.at).as_micros()).unwrap_or(i64::MAX);
    let ahead = u64::try_from(server.saturating_sub(local)).ok()?;
    let ahead = Duration::from_micros(ahead);
    let uncertainty = (before.rtt + after.rtt) / 2 + STEP_TOLERANCE;
    (ahead > uncertainty).then_some(ahead)
}

/// Reads the clock and the run id of the server behind `link`, or of every master of a
/// cluster, with the node's address (empty for one server).
async fn read_clocks(mut link: Link) -> redis::RedisResult<Vec<(String, Reading)>> {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let sent = Instant::now();
    let (times, infos): (Value, Value) = match &mut link {
        Link::Cluster(cluster) => {
            let all = || RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let times = cluster.route_command(redis::cmd("TIME"), all()).await?;
            // A user whose ACL refuses `INFO` still gets its clocks read.
            let infos = cluster.route_command(info, all()).await;
            (times, infos.unwrap_or(Value::Nil))
        }
        other => {
            // One round trip: the run id rides with the clock (an error reply, say an ACL that
            // refuses `INFO`, stays in its place).
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            pipe.cmd("TIME").add_command(info);
            let replies: Vec<Value> = pipe.query_async(other).await?;
            let mut replies = replies.into_iter();
            let time = replies.next().unwrap_or(Value::Nil);
            (time, replies.next().unwrap_or(Value::Nil))
        }
    };
    let rtt = sent.elapsed();
    let at = sent + rtt / 2;
    let reading = |time: Value, run_id: Option<String>| -> Option<Reading> {
        let (secs, micros): (i64, i64) = redis::from_redis_value(time).ok()?;
        let server_us = secs.checked_mul(1_000_000)?.checked_add(micros)?;
        #[cfg(feature = "testing")]
        let kit = check_faults::shown(run_id.as_deref());
        Some(Reading {
            #[cfg(feature = "testing")]
            server_us: server_us.saturating_add(kit.ahead_us),
            #[cfg(not(feature = "testing"))]
            server_us,
            at,
            rtt,
            run_id,
            #[cfg(feature = "testing")]
            kit,
        })
    };
    Ok(match (times, infos) {
        (Value::Map(times), infos) => {
            let mut run_ids: HashMap<String, String> = match infos {
                Value::Map(infos) => infos
                    .into_iter()
                    .filter_map(|(node, info)| {
                        let node = redis::from_redis_value(node).ok()?;
                        Some((node, run_id(info)?))
                    })
                    .collect(),
                _ => HashMap::new(),
            };
            times
                .into_iter()
                .filter_map(|(node, time)| {
                    let node: String = redis::from_redis_value(node).ok()?;
                    let run_id = run_ids.remove(&node);
                    Some((node, reading(time, run_id)?))
                })
                .collect()
        }
        (time, info) => reading(time, run_id(info))
            .map(|r| (String::new(), r))
            .into_iter()
            .collect(),
    })
}

/// The `run_id` line of an `INFO server` reply.
fn run_id(info: Value) -> Option<String> {
    let text: String = redis::from_redis_value(info).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, local_ms: u64, server_ms: i64, rtt_ms: u64) -> Reading {
        Reading {
            server_us: server_ms * 1000,
            at: base + Duration::from_millis(local_ms),
            rtt: Duration::from_millis(rtt_ms),
            run_id: Some("a".into()),
            #[cfg(feature = "testing")]
            kit: check_faults::Shown::default(),
        }
    }

    #[test]
    fn a_clock_that_moves_with_ours_has_not_stepped() {
        let base = Instant::now();
        let before = at(base, 0, 1_000_000, 1);
        assert_eq!(stepped(&before, &at(base, 250, 1_000_250, 1)), None);
        // Read late in a slow round trip: within the readings' uncertainty.
        assert_eq!(stepped(&before, &at(base, 250, 1_000_265, 10)), None);
        // Back: keys outlive their leases; not a step that matters.
        assert_eq!(stepped(&before, &at(base, 250, 999_000, 1)), None);
    }

    #[test]
    fn a_clock_that_ran_ahead_has_stepped() {
        let base = Instant::now();
        let before = at(base, 0, 1_000_000, 1);
        let ahead = stepped(&before, &at(base, 250, 1_060_250, 1));
        assert_eq!(ahead, Some(Duration::from_secs(60)));
        assert!(stepped(&before, &at(base, 250, 1_000_300, 1)).is_some());
    }

    #[test]
    fn another_run_id_is_a_restart() {
        let base = Instant::now();
        let before = at(base, 0, 1_000_000, 1);
        let same = at(base, 250, 1_000_250, 1);
        assert!(!restarted(&before, &same));
        let again = Reading {
            run_id: Some("b".into()),
            ..same.clone()
        };
        assert!(restarted(&before, &again));
        let unknown = Reading {
            run_id: None,
            ..same
        };
        assert!(!restarted(&before, &unknown));
        let info =
            Value::BulkString(b"# Server\r\nredis_version:7.0.15\r\nrun_id:3f1a\r\n".to_vec());
        assert_eq!(run_id(info).as_deref(), Some("3f1a"));
    }
}
