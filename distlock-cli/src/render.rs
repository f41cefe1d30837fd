//! What the operator reads: tables, the detail of one lock, durations, and the JSON forms.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use distlock::redis::RedisError;
use serde::Serialize;

use crate::cluster::Node;
use crate::failure::Failure;
use crate::layout::{short_owner, Lock, NotALock, Process};
use crate::server::Explain;

/// Writes `text` to standard output. A closed pipe (`distlock list | head -1`) ends the process
/// quietly, as it would for any Unix tool.
pub(crate) fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// `value` as JSON text (pretty, or one line for `watch`).
pub(crate) fn json<T: serde::Serialize>(value: &T, pretty: bool) -> String {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    // Serializing plain data into a string cannot fail.
    text.unwrap_or_default() + "\n"
}

/// A table with a header row; columns listed in `right` are right-aligned.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            if i > 0 {
                out.push_str("  ");
            }
            if right.contains(&i) {
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            } else {
                out.push_str(cell);
                if i + 1 < cells.len() {
                    out.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push('\n');
        out
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The columns `list` and `watch` share, for one lock.
///
/// A semaphore's holder names the permits in use of its count: `api:acme [2/5]`; a reader
/// the readers holding the lock: `doc:7 [read 3]`.
pub(crate) fn lock_cells(lock: &Lock) -> Vec<String> {
    let name = match (lock.permits, lock.readers) {
        (Some(p), _) => format!("{} [{}/{}]", lock.name, p.in_use, p.of),
        (None, Some(n)) => format!("{} [read {n}]", lock.name),
        (None, None) if !lock.set.is_empty() => {
            format!("{} [set of {}]", lock.name, lock.set.len())
        }
        (None, None) if lock.leader.is_some() => format!("{} [leader]", lock.name),
        (None, None) => lock.name.clone(),
    };
    vec![
        name,
        short_owner(&lock.owner),
        match (&lock.process, &lock.process_unread) {
            (Some(process), _) => process_brief(process),
            (None, Some(_)) => "?".to_owned(),
            (None, None) => "–".to_owned(),
        },
        lock.ttl_ms.map_or_else(|| "none".to_owned(), millis),
        lock.fencing_token
            .map_or_else(|| "–".to_owned(), |t| t.to_string()),
        lock.queued.to_string(),
        lock.waiting_clients.to_string(),
    ]
}

/// `list`'s header (the columns of [`lock_cells`]).
///
/// `QUEUED`: the waiting calls queued in Redis; `CLIENTS`: the clients with waiters
/// (subscribed to the release channel) — five calls from two processes are `5` and `2`.
pub(crate) const LOCK_HEADER: [&str; 7] = [
    "NAME", "OWNER", "PROCESS", "TTL", "FENCE", "QUEUED", "CLIENTS",
];

/// `web-1/4242 billing [payments]`: host/pid, program, client name.
fn process_brief(p: &Process) -> String {
    let mut out = format!(
        "{}/{}",
        p.host.as_deref().unwrap_or("?"),
        p.pid.map_or_else(|| "?".to_owned(), |pid| pid.to_string())
    );
    if let Some(exe) = &p.exe {
        out.push(' ');
        out.push_str(exe);
    }
    if let Some(name) = &p.client_name {
        out.push_str(&format!(" [{name}]"));
    }
    out
}

/// Everything about one lock, a field per line.
pub(crate) fn detail(lock: &Lock, prefix: &str) -> String {
    let mut rows: Vec<(&str, String)> = vec![
        ("name", lock.name.clone()),
        ("key", lock.key.clone()),
        ("owner", lock.owner.clone()),
    ];
    if let Some(n) = lock.readers {
        rows.push((
            "readers",
            format!("{n} holding it for reading (a shared hold; this holder is one)"),
        ));
    }
    if !lock.set.is_empty() {
        rows.push((
            "set",
            format!(
                "taken together with its other locks, all or none: {} (release --force frees one lock of the set; its holder is told Lost)",
                lock.set.join(", ")
            ),
        ));
    }
    if let Some(p) = lock.permits {
        rows.push((
            "permits",
            format!(
                "{} of {} in use (a semaphore; this holder has one)",
                p.in_use, p.of
            ),
        ));
    }
    match &lock.process {
        Some(p) => {
            rows.push(("host", p.host.clone().unwrap_or_else(|| "?".into())));
            rows.push((
                "pid",
                p.pid.map_or_else(|| "?".into(), |pid| pid.to_string()),
            ));
            if let Some(exe) = &p.exe {
                rows.push(("program", exe.clone()));
            }
            if let Some(name) = &p.client_name {
                rows.push(("client", format!("installed as `{name}`")));
            }
            if let Some(since) = p.connected_unix {
                rows.push(("connected", format!("{} ago", ago(since))));
            }
            if let Some(version) = &p.version {
                rows.push(("version", format!("distlock {version}")));
            }
        }
        None if lock.process_unread.is_some() => rows.push((
            "process",
            format!(
                "unknown: its identity record `{prefix}:client:{}` could not be read ({})",
                lock.client_id,
                lock.process_unread.as_deref().unwrap_or_default()
            ),
        )),
        None => rows.push((
            "process",
            format!(
                "unknown: no identity record `{prefix}:client:{}` (its client has not been seen for a minute, could not write one, or predates them)",
                lock.client_id
            ),
        )),
    }
    rows.push((
        "ttl",
        lock.ttl_ms.map_or_else(
            || "none: the key has no expiry (not set by distlock)".to_owned(),
            |ms| format!("{} left", millis(ms)),
        ),
    ));
    if let Some(leader) = &lock.leader {
        rows.push((
            "leader",
            format!(
                "term {} of the election `{}`, led by {} for {}",
                leader.term,
                lock.name,
                leader.identity,
                ago(leader.since_ms / 1000)
            ),
        ));
    }
    rows.push((
        "fence",
        lock.fencing_token.map_or_else(
            || "none: no fencing token handed out for this name recently".to_owned(),
            |t| format!("{t} (the last fencing token handed out for this name)"),
        ),
    ));
    rows.push((
        "waiting",
        format!(
            "{} call(s) queued, from {} client(s) subscribed to its release channel",
            lock.queued, lock.waiting_clients
        ),
    ));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

/// A Redis Cluster's masters as a listing read them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Masters {
    /// Every master serving slots, `host:port`.
    pub(crate) all: Vec<String>,
    /// Those that could not be read, each with why (their locks are not shown).
    pub(crate) unread: Vec<Unread>,
}

/// A master a listing could not read.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Unread {
    pub(crate) node: String,
    pub(crate) error: String,
}

impl Masters {
    pub(crate) fn of(all: &[Node], unread: &[(Node, RedisError)], explain: &Explain) -> Masters {
        Masters {
            all: all.iter().map(Node::to_string).collect(),
            unread: unread
                .iter()
                .map(|(node, error)| Unread {
                    node: node.to_string(),
                    error: explain.for_node(node).error(error).message,
                })
                .collect(),
        }
    }

    /// `3 of 3 masters read`, `2 of 3 masters read (127.0.0.1:7002 not)`.
    pub(crate) fn summary(&self) -> String {
        let read = self.all.len() - self.unread.len();
        let mut out = format!("{read} of {} masters read", self.all.len());
        if !self.unread.is_empty() {
            let nodes: Vec<&str> = self.unread.iter().map(|u| u.node.as_str()).collect();
            out.push_str(&format!(": not {}", nodes.join(", ")));
        }
        out
    }

    /// The command's failure when a master could not be read: its locks are missing.
    pub(crate) fn unread_failure(&self) -> Option<Failure> {
        if self.unread.is_empty() {
            return None;
        }
        let lines: Vec<String> = self
            .unread
            .iter()
            .map(|u| {
                format!(
                    "master {} of the Redis Cluster could not be read, its locks are not shown: {}",
                    u.node, u.error
                )
            })
            .collect();
        Some(Failure::failed(lines.join("\n")))
    }
}

/// What the listing's last line adds about where it read: ` (a Redis Cluster: 3 of 3 masters
/// read)`, ` (a replica: ...)`, or nothing for one server.
pub(crate) fn read_from(masters: Option<&Masters>, replica: bool) -> String {
    match masters {
        Some(masters) => format!(" (a Redis Cluster: {})", masters.summary()),
        None if replica => {
            " (a replica: what it shows may lag its master, and release --force needs the master)"
                .to_owned()
        }
        None => String::new(),
    }
}

/// What a key that is not a lock means, in one line.
pub(crate) fn not_a_lock(odd: &NotALock) -> String {
    format!(
        "`{}` is not a distlock lock: it holds {}; acquiring its name fails until the key is removed",
        odd.key, odd.holds
    )
}

/// A remaining time: `850ms`, `9.8s`, `4m12s`, `2h05m`, `3d04h`.
pub(crate) fn millis(ms: u64) -> String {
    let s = ms / 1000;
    if ms < 1000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600)
    }
}

/// How long ago the Unix time `since` was.
fn ago(since: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    millis(now.saturating_sub(since).saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(millis(850), "850ms");
        assert_eq!(millis(9_812), "9.8s");
        assert_eq!(millis(252_000), "4m12s");
        assert_eq!(millis(7_500_000), "2h05m");
        assert_eq!(millis(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["order:42".to_owned(), "9".to_owned()],
            vec!["a".to_owned(), "10".to_owned()],
        ];
        assert_eq!(
            table(&["NAME", "N"], &rows, &[1]),
            "NAME       N\norder:42   9\na         10\n"
        );
    }
}
