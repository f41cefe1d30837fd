//! What a run costs: redis-server CPU time and commands, and this process's CPU time.

use std::collections::HashMap;

use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::contenders::BenchResult;

/// Reads the server's CPU time and per-command call counts, to charge Redis work to a run.
pub(crate) struct Probe {
    conn: MultiplexedConnection,
}

/// One reading of [`Probe`].
pub(crate) struct Snapshot {
    cpu_us: f64,
    client_cpu_us: f64,
    /// `calls` per command, from `INFO commandstats`.
    pub(crate) calls: HashMap<String, u64>,
}

/// The work between two snapshots, on both sides of the connection.
#[derive(Clone, Copy)]
pub(crate) struct Work {
    /// CPU time of redis-server (user + system), µs.
    pub(crate) cpu_us: f64,
    /// Commands executed (scripts and every command they ran), without the probe's own INFO.
    pub(crate) calls: f64,
    /// CPU time of this process (all threads: the runtime's workers, the contenders), µs.
    pub(crate) client_cpu_us: f64,
}

impl Work {
    pub(crate) fn per(self, n: f64) -> Work {
        Work {
            cpu_us: self.cpu_us / n,
            calls: self.calls / n,
            client_cpu_us: self.client_cpu_us / n,
        }
    }
}

/// CPU time of every thread of this process in µs, from `/proc/self/task/*/schedstat` (ns
/// resolution; 0 where unavailable).
fn process_cpu_us() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 1000.0
}

impl Probe {
    pub(crate) fn new(conn: MultiplexedConnection) -> Probe {
        Probe { conn }
    }

    pub(crate) async fn snapshot(&mut self) -> BenchResult<Snapshot> {
        let client_cpu_us = process_cpu_us();
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await?;
        let mut cpu_us = 0.0;
        for line in info.lines() {
            if let Some(v) = line
                .strip_prefix("used_cpu_sys:")
                .or_else(|| line.strip_prefix("used_cpu_user:"))
            {
                cpu_us += v.trim().parse::<f64>().unwrap_or(0.0) * 1e6;
            }
        }
        Ok(Snapshot {
            cpu_us,
            client_cpu_us,
            calls: parse_command_stats(&info),
        })
    }
}

impl Snapshot {
    pub(crate) fn work_since(&self, before: &Snapshot) -> Work {
        let calls: u64 = self
            .calls
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(name, &n)| n - before.calls.get(name).copied().unwrap_or(0))
            .sum();
        Work {
            cpu_us: self.cpu_us - before.cpu_us,
            calls: calls as f64,
            client_cpu_us: self.client_cpu_us - before.client_cpu_us,
        }
    }
}

/// The work between `start` and `end` (the tasks' warm-up is not charged), then every task's
/// result.
pub(crate) async fn measured_window<T>(
    probe: &mut Probe,
    start: Instant,
    end: Instant,
    handles: Vec<JoinHandle<BenchResult<T>>>,
) -> BenchResult<(Work, Vec<T>)> {
    tokio::time::sleep_until(start).await;
    let before = probe.snapshot().await?;
    tokio::time::sleep_until(end).await;
    let work = probe.snapshot().await?.work_since(&before);
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        results.push(handle.await??);
    }
    Ok((work, results))
}

/// `calls` per command from the `commandstats` section of `INFO`.
fn parse_command_stats(info: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        out.insert(name.to_owned(), calls);
    }
    out
}
