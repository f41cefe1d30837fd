//! `distlock`: an operator's view of distlock's locks in Redis.
//!
//! ```text
//! distlock list [PATTERN]              held locks: owner, process, ttl, fencing token, waiters, leaders
//! distlock show NAME                   one lock in full
//! distlock release NAME --force [-y]   delete a lock and wake its waiters
//! distlock watch [PATTERN]             a live table, until Ctrl-C
//! ```
//!
//! It reads the same settings as a distlock client (`--url`/`DISTLOCK_URL`, or
//! `--cluster`/`DISTLOCK_CLUSTER_NODES` (any nodes of a Redis Cluster), or
//! `--sentinel`/`DISTLOCK_SENTINELS` with `--sentinel-service`/`DISTLOCK_SENTINEL_SERVICE` for
//! the master Redis Sentinel names, `--prefix`/`DISTLOCK_KEY_PREFIX`, the timeouts), validated
//! the same way. A node that says it belongs to a Redis Cluster (`HELLO`), given as `--url` or
//! `--cluster`, leads to the whole cluster: `list` and `watch` scan every master and say how
//! many they read, and each lock, its waiters' subscriptions (sharded channels) and its
//! owner's identity record are read on the master of their slot. A RedLock quorum is read one
//! master at a time (`--url` naming one of them: every master holds every client's identity
//! record, and shows the locks it granted). It takes and shows lock *names* (what `lock(..)`
//! was given), not Redis keys. It looks with `SCAN`, never `KEYS`, and never prints the
//! password of a URL. Every failure is one line on standard error and an exit status: 1
//! failed, 2 bad arguments, 3 no such lock.
//!
//! Modules: `args` (the command line) → `server` (the connection, the master found through
//! Sentinel, and what its errors mean) → `cluster` (what a node is, and the connection that
//! reads each key where it lives) → `layout` (the only code that knows a lock's Redis
//! representation) → `render` (tables, detail, JSON); `watch` (the live table); `failure`
//! (messages and exit statuses).
#![deny(missing_docs)]

mod args;
mod cluster;
mod failure;
mod layout;
mod render;
mod server;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;

use args::{Cli, Command};
use failure::Failure;
use layout::{check_name, check_pattern, Entry, Layout, Lock, NotALock, Released};
use server::{Server, Target};

fn main() -> ExitCode {
    // Bad arguments: clap prints the error and usage and exits with 2.
    let cli = Cli::parse();
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the runtime: {e}")))
        .and_then(|runtime| runtime.block_on(run(cli)));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let mut err = std::io::stderr().lock();
            for line in failure.message.lines() {
                let _ = writeln!(err, "error: {line}");
            }
            ExitCode::from(failure.exit as u8)
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let sentinels: Vec<String> = cli
        .sentinels
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let cluster_nodes: Vec<String> = cli
        .cluster_nodes
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let (urls, cluster) = match (cli.url, sentinels.is_empty(), cluster_nodes.is_empty()) {
        (Some(url), true, true) => (vec![url], false),
        (None, true, false) => (cluster_nodes, true),
        (None, false, true) => {
            let service = cli.sentinel_service.ok_or_else(|| {
                Failure::usage("--sentinel needs --sentinel-service (or DISTLOCK_SENTINEL_SERVICE): the master's name at the sentinels")
            })?;
            let master_auth = std::env::var("DISTLOCK_SENTINEL_MASTER_PASSWORD")
                .ok()
                .map(|password| {
                    let username =
                        std::env::var("DISTLOCK_SENTINEL_MASTER_USERNAME").unwrap_or_default();
                    (username, password)
                });
            let through = server::Sentinels {
                urls: sentinels,
                service,
                master_auth,
                connect_timeout: cli.connect_timeout,
                response_timeout: cli.timeout,
            };
            (vec![through.master_url().await?], false)
        }
        (None, true, true) if std::env::var_os("DISTLOCK_REDLOCK_MASTERS").is_some() => {
            return Err(Failure::usage(
                "DISTLOCK_REDLOCK_MASTERS names a RedLock quorum, but distlock reads one server: pass --url with one of its masters (each master holds every client's identity record and the locks it granted)",
            ))
        }
        (None, true, true) => {
            return Err(Failure::usage(
                "no Redis URL: pass --url redis://host:port/ or set DISTLOCK_URL (or --cluster with any node of a Redis Cluster, or --sentinel with --sentinel-service)",
            ))
        }
        _ => {
            return Err(Failure::usage(
                "say where Redis is once: --url (DISTLOCK_URL), --cluster (DISTLOCK_CLUSTER_NODES) or --sentinel (DISTLOCK_SENTINELS)",
            ))
        }
    };
    let target = Target {
        urls,
        cluster,
        prefix: cli.prefix,
        connect_timeout: cli.connect_timeout,
        response_timeout: cli.timeout,
    };
    target.validate()?;
    let layout = Layout::new(&target.prefix);
    match cli.command {
        Command::List { pattern } => list(&target, &layout, pattern, cli.json).await,
        Command::Show { name } => show(&target, &layout, &name, cli.json).await,
        Command::Release { name, force, yes } => {
            release(&target, &layout, &name, force, yes, cli.json).await
        }
        Command::Watch { pattern, interval } => {
            let pattern = pattern_or_all(pattern)?;
            watch::run(&target, &layout, &pattern, interval, cli.json).await
        }
    }
}

fn pattern_or_all(pattern: Option<String>) -> Result<String, Failure> {
    let pattern = pattern.unwrap_or_else(|| "*".to_owned());
    check_pattern(&pattern)
        .map_err(|reason| Failure::usage(format!("invalid pattern `{pattern}`: {reason}")))?;
    Ok(pattern)
}

/// `list --json`.
#[derive(Serialize)]
struct Listing<'a> {
    prefix: &'a str,
    locks: Vec<Lock>,
    not_locks: Vec<NotALock>,
    /// A Redis Cluster's masters, read and not (absent on one server).
    #[serde(skip_serializing_if = "Option::is_none")]
    masters: Option<render::Masters>,
}

async fn list(
    target: &Target,
    layout: &Layout,
    pattern: Option<String>,
    as_json: bool,
) -> Result<(), Failure> {
    let pattern = pattern_or_all(pattern)?;
    let mut server = Server::connect(target).await?;
    let explain = server.explain.clone();
    let found = explain
        .call(layout.read_matching(&mut server.conn, &pattern))
        .await?;
    let mut locks = found.locks;
    // Sets taken together: each lock's set, from every lock held (not only those matching).
    let all = match pattern.as_str() {
        "*" => locks.clone(),
        _ => {
            explain
                .call(layout.read_matching(&mut server.conn, "*"))
                .await?
                .locks
        }
    };
    layout::mark_sets(&mut locks, &all);
    let masters = server
        .conn
        .is_cluster()
        .then(|| render::Masters::of(&found.masters, &found.unread, &explain));
    if as_json {
        render::print(&render::json(
            &Listing {
                prefix: layout.prefix(),
                locks,
                not_locks: found.not_locks.clone(),
                masters: masters.clone(),
            },
            true,
        ))?;
    } else {
        let mut out = String::new();
        if !locks.is_empty() {
            let rows: Vec<Vec<String>> = locks.iter().map(render::lock_cells).collect();
            out = render::table(&render::LOCK_HEADER, &rows, &[3, 4, 5, 6]);
        }
        let held = match locks.len() {
            0 => "no locks held".to_owned(),
            1 => "1 lock held".to_owned(),
            n => format!("{n} locks held"),
        };
        let matching = if pattern == "*" {
            String::new()
        } else {
            format!(" matching `{pattern}`")
        };
        out.push_str(&format!(
            "{held}{matching} under prefix `{}` on {}{}\n",
            layout.prefix(),
            target.shown_url(),
            render::read_from(masters.as_ref(), server.replica)
        ));
        render::print(&out)?;
    }
    if let Some(unread) = masters.as_ref().and_then(render::Masters::unread_failure) {
        return Err(unread);
    }
    not_locks_failure(&found.not_locks)
}

/// One line per key under the prefix that is not a lock (acquiring its name fails).
fn not_locks_failure(not_locks: &[NotALock]) -> Result<(), Failure> {
    if not_locks.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = not_locks.iter().map(render::not_a_lock).collect();
    Err(Failure::failed(lines.join("\n")))
}

/// The lock `name` (a semaphore: each of its holders), or the failure that says why there is
/// none.
async fn one_lock(server: &mut Server, layout: &Layout, name: &str) -> Result<Vec<Lock>, Failure> {
    check_name(name)
        .map_err(|reason| Failure::usage(format!("invalid lock name `{name}`: {reason}")))?;
    let explain = server.explain.clone();
    let entries = explain
        .call(layout.read(&mut server.conn, &[name.to_owned()]))
        .await?;
    match entries.into_iter().next().map(|(_, entry)| entry) {
        Some(Entry::Lock(lock)) => Ok(vec![*lock]),
        Some(Entry::Semaphore(holders)) => Ok(holders),
        Some(Entry::NotALock(odd)) => Err(Failure::failed(render::not_a_lock(&odd))),
        Some(Entry::Free) | None => Err(Failure::no_such_lock(format!(
            "no lock `{name}` is held under prefix `{}`",
            layout.prefix()
        ))),
    }
}

async fn show(target: &Target, layout: &Layout, name: &str, as_json: bool) -> Result<(), Failure> {
    // A bad name is a usage error before anything connects.
    check_name(name)
        .map_err(|reason| Failure::usage(format!("invalid lock name `{name}`: {reason}")))?;
    let mut server = Server::connect(target).await?;
    let mut holders = one_lock(&mut server, layout, name).await?;
    if let [lock] = &holders[..] {
        if lock.permits.is_none() && lock.readers.is_none() {
            // Whether it is one lock of a set taken together: every lock held with its owner.
            let explain = server.explain.clone();
            let all = explain
                .call(layout.read_matching(&mut server.conn, "*"))
                .await?
                .locks;
            layout::mark_sets(&mut holders, &all);
        }
    }
    match &holders[..] {
        [lock] if lock.permits.is_none() && lock.readers.is_none() && as_json => {
            render::print(&render::json(lock, true))
        }
        [lock] if lock.permits.is_none() && lock.readers.is_none() => {
            render::print(&render::detail(lock, layout.prefix()))
        }
        _ if as_json => render::print(&render::json(&holders, true)),
        _ => {
            // A semaphore or readers: each holder in full, one after another.
            let details: Vec<String> = holders
                .iter()
                .map(|lock| render::detail(lock, layout.prefix()))
                .collect();
            render::print(&details.join("\n"))
        }
    }
}

/// `release --json`.
#[derive(Serialize)]
struct ReleaseReport<'a> {
    released: bool,
    /// The lock, or a semaphore's holders (each removed).
    lock: &'a [Lock],
    woken_clients: u64,
}

async fn release(
    target: &Target,
    layout: &Layout,
    name: &str,
    force: bool,
    yes: bool,
    as_json: bool,
) -> Result<(), Failure> {
    check_name(name)
        .map_err(|reason| Failure::usage(format!("invalid lock name `{name}`: {reason}")))?;
    if !force {
        return Err(Failure::usage(format!(
            "not released: releasing `{name}` lets another process take it while its holder may still be working, unprotected; pass --force to release it anyway"
        )));
    }
    let mut server = Server::connect(target).await?;
    if server.replica {
        return Err(Failure::failed(format!(
            "not released: {} is a replica, which takes no writes; point --url at its master (or pass --sentinel, and distlock finds the current master)",
            server.explain.shown()
        )));
    }
    let holders = one_lock(&mut server, layout, name).await?;
    let held_by = held_by(&holders);
    if !yes && !confirm(&format!("release lock `{name}` {held_by}? [y/N] "))? {
        return Err(Failure::failed(format!(
            "not released: `{name}` is still held (answer y, or pass --yes)"
        )));
    }
    let explain = server.explain.clone();
    let released = explain
        .call(layout.force_release(
            &mut server.conn,
            name,
            &holders.iter().map(|h| h.owner.as_str()).collect::<Vec<_>>(),
        ))
        .await?;
    match released {
        Released::Deleted { woken_clients } => {
            if as_json {
                render::print(&render::json(
                    &ReleaseReport {
                        released: true,
                        lock: &holders,
                        woken_clients,
                    },
                    true,
                ))
            } else {
                render::print(&format!(
                    "released lock `{name}` {held_by}; woke {woken_clients} waiting client(s)\n"
                ))
            }
        }
        Released::ChangedHands => Err(Failure::failed(format!(
            "not released: `{name}` changed hands since it was read (it was {held_by}); run the command again to see its new owner"
        ))),
    }
}

/// `held by <owner> (web-1 pid 4242 billing), 9.8s left`; a semaphore's holders one after
/// another (`2 of 5 permits held by ... and by ...`), readers likewise (`(2 readers) held by
/// ...`).
fn held_by(holders: &[Lock]) -> String {
    let each: Vec<String> = holders.iter().map(held_by_one).collect();
    let first = holders.first();
    match (first.and_then(|h| h.permits), first.and_then(|h| h.readers)) {
        (Some(p), _) => format!("({} of {} permits) {}", p.in_use, p.of, each.join(" and ")),
        (None, Some(n)) => format!("({n} readers) {}", each.join(" and ")),
        (None, None) => each.join(" and "),
    }
}

fn held_by_one(lock: &Lock) -> String {
    let process = match &lock.process {
        Some(p) => format!(
            " ({} pid {}{})",
            p.host.as_deref().unwrap_or("?"),
            p.pid.map_or_else(|| "?".to_owned(), |pid| pid.to_string()),
            p.exe
                .as_deref()
                .map(|e| format!(" {e}"))
                .unwrap_or_default()
        ),
        None => " (process unknown)".to_owned(),
    };
    let ttl = lock.ttl_ms.map_or_else(
        || "no expiry".to_owned(),
        |ms| format!("{} left", render::millis(ms)),
    );
    format!("held by {}{process}, {ttl}", lock.owner)
}

/// Asks on standard error and reads one answer from standard input (end of input: no).
fn confirm(question: &str) -> Result<bool, Failure> {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(question.as_bytes());
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| Failure::failed(format!("cannot read the answer: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
