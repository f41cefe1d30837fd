//! `distlock watch`: a live table of the locks, refreshed until Ctrl-C.
//!
//! Every interval it reads the locks matching the pattern (as `list` does) and counts the
//! acquisitions since the last refresh. Redis has no record of acquisitions, so they are
//! counted from what can be seen: the lock's release notifications (a pattern subscription to
//! the release channels, what waiting clients hear: a release publishes only when someone
//! waits for the lock, a release nobody waited for is silent), or, when none came, one if the lock's
//! owner changed between two refreshes. A lock that expired without a release and was taken
//! again between two refreshes counts once, so the rate is a lower bound.
//!
//! On a Redis Cluster every refresh scans every master (the header says how many it read), and
//! release channels are sharded (`SSUBSCRIBE` takes no pattern), so acquisitions are counted
//! from owner changes alone there.
//!
//! A failed refresh (Redis restarting) is shown in the frame and retried; only the first
//! connection must succeed.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde::Serialize;

use crate::failure::Failure;
use crate::layout::{Found, Layout, Lock, NotALock};
use crate::render::{self, Masters};
use crate::server::{Server, Target};

/// Release notifications per lock name since the last refresh, filled by the subscriber task.
#[derive(Clone, Default)]
struct Releases {
    counts: Arc<Mutex<HashMap<String, u64>>>,
    /// The subscription ended (the connection dropped): subscribe again.
    lost: Arc<AtomicBool>,
}

impl Releases {
    /// Subscribes to the release channels of the names matching `pattern`.
    async fn subscribe(
        &self,
        server: &Server,
        layout: &Layout,
        pattern: &str,
        within: Duration,
    ) -> Result<(), Failure> {
        let explain = &server.explain;
        let subscribe = async {
            let mut pubsub = server.client.get_async_pubsub().await?;
            pubsub.psubscribe(layout.channel_pattern(pattern)).await?;
            Ok(pubsub)
        };
        let pubsub = match tokio::time::timeout(within, subscribe).await {
            Ok(result) => explain.call(async { result }).await?,
            Err(_) => {
                return Err(Failure::failed(
                    "cannot subscribe to release notifications: no answer in time",
                ))
            }
        };
        self.lost.store(false, Ordering::Release);
        let (counts, lost, layout) = (self.counts.clone(), self.lost.clone(), layout.clone());
        drop(tokio::spawn(async move {
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                if let Some(name) = layout.name_of_channel(message.get_channel_name()) {
                    *lock(&counts).entry(name).or_default() += 1;
                }
            }
            lost.store(true, Ordering::Release);
        }));
        Ok(())
    }

    fn take(&self) -> HashMap<String, u64> {
        std::mem::take(&mut *lock(&self.counts))
    }

    fn lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One refresh, as `--json` prints it (one line each).
#[derive(Serialize)]
struct Frame {
    unix_ms: u64,
    held: usize,
    /// Waiting calls queued in Redis, over every lock shown.
    queued: u64,
    /// Clients with waiters, over every lock shown.
    waiting_clients: u64,
    /// Acquisitions per second over the last interval (`None` on the first frame).
    acquires_per_sec: Option<f64>,
    locks: Vec<Row>,
    not_locks: Vec<NotALock>,
    /// A Redis Cluster's masters, read and not (absent on one server).
    #[serde(skip_serializing_if = "Option::is_none")]
    masters: Option<Masters>,
    /// Why this refresh failed (it is retried).
    error: Option<String>,
}

/// A lock that is held, or was released during the last interval.
#[derive(Serialize)]
struct Row {
    name: String,
    /// `None`: free now.
    lock: Option<Lock>,
    acquires_per_sec: Option<f64>,
}

/// Refreshes the table every `interval` until Ctrl-C.
pub(crate) async fn run(
    target: &Target,
    layout: &Layout,
    pattern: &str,
    interval: Duration,
    as_json: bool,
) -> Result<(), Failure> {
    let mut server = Server::connect(target).await?;
    let within = target.connect_timeout + target.response_timeout;
    let releases = Releases::default();
    // Sharded release channels take no pattern: on a cluster, owner changes alone count.
    let subscribed = !server.conn.is_cluster();
    if subscribed {
        releases.subscribe(&server, layout, pattern, within).await?;
    }
    let terminal = std::io::stdout().is_terminal();
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    let mut owners: Option<HashMap<String, String>> = None;
    let mut since = Instant::now();
    loop {
        let explain = server.explain.clone();
        let read = explain.call(layout.read_matching(&mut server.conn, pattern));
        let read = tokio::select! {
            _ = &mut ctrl_c => break,
            read = read => read,
        };
        if subscribed && releases.lost() {
            // Best effort: the next refresh tries again.
            let _ = releases.subscribe(&server, layout, pattern, within).await;
        }
        let elapsed = since.elapsed().as_secs_f64().max(1e-3);
        since = Instant::now();
        let frame = match read {
            Ok(found) => {
                let masters = server
                    .conn
                    .is_cluster()
                    .then(|| Masters::of(&found.masters, &found.unread, &explain));
                let mut frame = frame(found, releases.take(), owners.as_ref(), elapsed);
                frame.masters = masters;
                owners = Some(
                    frame
                        .locks
                        .iter()
                        .filter_map(|r| Some((r.name.clone(), r.lock.as_ref()?.owner.clone())))
                        .collect(),
                );
                frame
            }
            Err(failure) => Frame {
                unix_ms: unix_ms(),
                held: 0,
                queued: 0,
                waiting_clients: 0,
                acquires_per_sec: None,
                locks: Vec::new(),
                not_locks: Vec::new(),
                masters: None,
                error: Some(failure.message),
            },
        };
        let text = if as_json {
            render::json(&frame, false)
        } else {
            table(&frame, target, layout, pattern, interval, terminal)
        };
        render::print(&text)?;
        tokio::select! {
            _ = &mut ctrl_c => break,
            () = tokio::time::sleep(interval) => {}
        }
    }
    if terminal && !as_json {
        render::print("\n")?;
    }
    Ok(())
}

/// The rows of one refresh: the held locks, and the names released since the last one.
fn frame(
    found: Found,
    mut released: HashMap<String, u64>,
    owners: Option<&HashMap<String, String>>,
    elapsed: f64,
) -> Frame {
    let Found {
        locks, not_locks, ..
    } = found;
    let first = owners.is_none();
    let rate = |name: &str, owner: Option<&str>| -> Option<f64> {
        let owners = owners?;
        let releases = released.get(name).copied().unwrap_or(0);
        let changed = owner.is_some() && owners.get(name).map(String::as_str) != owner;
        Some(releases.max(u64::from(changed)) as f64 / elapsed)
    };
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for lock in locks {
        let acquires_per_sec = rate(&lock.name, Some(&lock.owner));
        rows.insert(
            lock.name.clone(),
            Row {
                name: lock.name.clone(),
                lock: Some(lock),
                acquires_per_sec,
            },
        );
    }
    for name in released.keys() {
        if !rows.contains_key(name) {
            rows.insert(
                name.clone(),
                Row {
                    name: name.clone(),
                    lock: None,
                    acquires_per_sec: rate(name, None),
                },
            );
        }
    }
    released.clear();
    let locks: Vec<Row> = rows.into_values().collect();
    let held = locks.iter().filter(|r| r.lock.is_some()).count();
    let queued = locks
        .iter()
        .filter_map(|r| r.lock.as_ref())
        .map(|l| l.queued)
        .sum();
    let waiting_clients = locks
        .iter()
        .filter_map(|r| r.lock.as_ref())
        .map(|l| l.waiting_clients)
        .sum();
    let acquires_per_sec = if first {
        None
    } else {
        Some(
            locks
                .iter()
                .filter_map(|r| r.acquires_per_sec)
                .fold(0.0, |a, b| a + b),
        )
    };
    Frame {
        unix_ms: unix_ms(),
        held,
        queued,
        waiting_clients,
        acquires_per_sec,
        locks,
        not_locks,
        masters: None,
        error: None,
    }
}

/// The frame as a screen: clears the terminal first, or ends with a blank line in a pipe.
fn table(
    frame: &Frame,
    target: &Target,
    layout: &Layout,
    pattern: &str,
    interval: Duration,
    terminal: bool,
) -> String {
    let mut out = String::new();
    if terminal {
        out.push_str("\x1b[H\x1b[2J");
    }
    let matching = if pattern == "*" {
        String::new()
    } else {
        format!(" · `{pattern}`")
    };
    out.push_str(&format!(
        "distlock watch · {} · prefix `{}`{matching} · every {} · Ctrl-C quits\n",
        target.shown_url(),
        layout.prefix(),
        crate::server::seconds(interval)
    ));
    if let Some(error) = &frame.error {
        out.push_str(&format!("refresh failed, retrying: {error}\n"));
    } else {
        if let Some(masters) = &frame.masters {
            out.push_str(&format!(
                "a Redis Cluster: {} · acquires counted from owner changes\n",
                masters.summary()
            ));
        }
        out.push_str(&format!(
            "{} held · {} queued call(s) from {} waiting client(s) · {} acquires/s\n\n",
            frame.held,
            frame.queued,
            frame.waiting_clients,
            frame
                .acquires_per_sec
                .map_or("–".to_owned(), |r| format!("{r:.1}"))
        ));
        let rows: Vec<Vec<String>> = frame
            .locks
            .iter()
            .map(|row| {
                let mut cells = match &row.lock {
                    Some(lock) => render::lock_cells(lock),
                    None => vec![
                        row.name.clone(),
                        "(free)".to_owned(),
                        String::new(),
                        String::new(),
                        String::new(),
                        "0".to_owned(),
                    ],
                };
                cells.push(
                    row.acquires_per_sec
                        .map_or("–".to_owned(), |r| format!("{r:.1}")),
                );
                cells
            })
            .collect();
        if rows.is_empty() {
            out.push_str("(no locks held)\n");
        } else {
            let mut header = render::LOCK_HEADER.to_vec();
            header.push("ACQ/S");
            out.push_str(&render::table(&header, &rows, &[3, 4, 5, 6, 7]));
        }
        for odd in &frame.not_locks {
            out.push_str(&format!("! {}\n", render::not_a_lock(odd)));
        }
        for unread in frame.masters.iter().flat_map(|m| &m.unread) {
            out.push_str(&format!(
                "! master {} not read: {}\n",
                unread.node, unread.error
            ));
        }
    }
    if !terminal {
        out.push('\n');
    }
    out
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
