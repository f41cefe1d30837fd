//! Which process a client belongs to: one small, expiring record per connected client, so an
//! operator (the `distlock` CLI) can turn a lock's owner into a host name and a process id.
//!
//! A lock's owner is `<client id>:<counter>`, and the client id is made at connect. The client
//! then writes `<prefix>:client:<client id>`, a hash of
//!
//! | field | value |
//! | --- | --- |
//! | `host` | the host name |
//! | `pid` | the process id |
//! | `exe` | the program's file name |
//! | `name` | the name the client was installed under (absent for the default client) |
//! | `started` | when the client connected, in Unix seconds |
//! | `version` | the distlock-core version |
//!
//! with an expiry of [`RECORD_TTL`] (set by the same script, `CLIENT_RECORD`, so a record never
//! outlives its expiry), and rewrites it every [`REFRESH_EVERY`] from the client's runtime
//! thread.
//!
//! **Memory is bounded by the clients alive in the last minute**: one record (a few hundred
//! bytes) per client, never one per lock or per acquisition. A client that is dropped, or whose
//! process dies, stops refreshing and its record expires within [`RECORD_TTL`]; an owner without
//! a record therefore belongs to a client that has not been seen for that long (or that could
//! not write one). The key never starts with `<prefix>:{`, so it is never taken for a lock.
//!
//! Best effort: the record never fails a connect or a lock. A server that refuses the write (an
//! ACL that allows only the lock keys) has no records, and tools show the owner id alone. The
//! first write is part of connecting (one round trip on the new connection), so a lock taken
//! right after `init` already names its process; each refresh opens a short-lived connection
//! from the client's runtime thread rather than keeping one open for three writes a minute.
//!
//! A RedLock client (`Config::redlock`) writes the record on every master, at once, and
//! refreshes it on every master: whichever master an operator reads, the owners of the locks
//! it holds name their processes. A master that is down at connect (or refuses the write)
//! does not fail the connect; it gets the record at the first refresh after it is back
//! (within [`REFRESH_EVERY`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use redis::aio::ConnectionLike;
use tokio::runtime::Handle;

use crate::config::Config;
use crate::deploy::backend::{Backend, Link};
use crate::wire::request::CLIENT_RECORD_SCRIPT;

/// How long a record outlives the last refresh of its client.
pub(crate) const RECORD_TTL: Duration = Duration::from_secs(60);

/// How often a connected client rewrites its record (a third of [`RECORD_TTL`], so two refreshes
/// may fail before the record lapses).
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(20);

/// This process as the `distlock` CLI shows a holder: `host/pid program`.
pub(crate) fn process_identity() -> String {
    let pid = std::process::id();
    match program() {
        Some(exe) => format!("{}/{pid} {exe}", host()),
        None => format!("{}/{pid}", host()),
    }
}

/// This machine's host name.
fn host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// This process's program file name.
fn program() -> Option<String> {
    let path = std::env::current_exe().ok()?;
    Some(path.file_name()?.to_string_lossy().into_owned())
}

/// The key of the record of the client whose id is `client_id`.
pub(crate) fn record_key(prefix: &str, client_id: &str) -> String {
    format!("{prefix}:client:{client_id}")
}

/// One client's record: its key and its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    key: String,
    fields: Vec<(&'static str, String)>,
}

impl Record {
    /// The record of this process for the client `client_id` installed as `name`.
    fn of_this_process(prefix: &str, client_id: &str, name: Option<&str>) -> Record {
        let mut fields = vec![("host", host()), ("pid", std::process::id().to_string())];
        if let Some(exe) = program() {
            fields.push(("exe", exe));
        }
        if let Some(name) = name {
            fields.push(("name", name.to_owned()));
        }
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        fields.push(("started", started.to_string()));
        fields.push(("version", env!("CARGO_PKG_VERSION").to_owned()));
        Record {
            key: record_key(prefix, client_id),
            fields,
        }
    }

    /// Writes the record with its expiry, both or neither (one script, `CLIENT_RECORD`),
    /// within `timeout`.
    async fn write<C: ConnectionLike>(
        &self,
        conn: &mut C,
        timeout: Duration,
    ) -> Result<(), String> {
        let mut cmd = CLIENT_RECORD_SCRIPT.evalsha();
        cmd.arg(1).arg(&self.key).arg(RECORD_TTL.as_millis() as u64);
        for (field, value) in &self.fields {
            cmd.arg(*field).arg(value);
        }
        let written = CLIENT_RECORD_SCRIPT.run::<i64, _>(conn, &cmd);
        match tokio::time::timeout(timeout, written).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("no reply within {timeout:?}")),
        }
    }
}

/// Writes the record of the client `client_id` (installed as `name`) on every server of
/// `servers` (one; each master of a RedLock quorum), each on its command connection, all at
/// once, then keeps it fresh on each of them from `background` (the client's runtime) until
/// that runtime stops with the client. Failures are logged at `debug` per server and never
/// returned: a server that is down at connect gets the record at the first refresh after it
/// is back.
pub(crate) async fn announce(
    servers: Vec<(Link, Arc<Backend>)>,
    background: &Handle,
    config: &Config,
    client_id: &str,
    name: Option<&str>,
) {
    let record = Arc::new(Record::of_this_process(&config.key_prefix, client_id, name));
    let timeout = config.response_timeout;
    let (links, backends): (Vec<Link>, Vec<Arc<Backend>>) = servers.into_iter().unzip();
    let first = links.into_iter().enumerate().map(|(server, mut conn)| {
        let record = &record;
        async move {
            if let Err(error) = record.write(&mut conn, timeout).await {
                tracing::debug!(key = %record.key, server, %error, "could not write the client's identity record");
            }
        }
    });
    futures_util::future::join_all(first).await;
    // The task holds no part of the client, so it never keeps it alive; it ends when the
    // client's runtime stops.
    drop(background.spawn(async move {
        let start = tokio::time::Instant::now() + REFRESH_EVERY;
        let mut refresh = tokio::time::interval_at(start, REFRESH_EVERY);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            refresh.tick().await;
            let writes = backends.iter().enumerate().map(|(server, backend)| {
                let record = &record;
                async move {
                    let written = match backend.fresh_link().await {
                        Ok(mut conn) => record.write(&mut conn, timeout).await,
                        Err(error) => Err(error.to_string()),
                    };
                    if let Err(error) = written {
                        tracing::debug!(key = %record.key, server, %error, "could not refresh the client's identity record");
                    }
                }
            });
            futures_util::future::join_all(writes).await;
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_host_pid_and_client() {
        let record = Record::of_this_process("locks", "d2:abc", Some("payments"));
        assert_eq!(record.key, "locks:client:d2:abc");
        let field = |name: &str| {
            record
                .fields
                .iter()
                .find(|(f, _)| *f == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(field("pid"), Some(std::process::id().to_string()));
        assert_eq!(field("name").as_deref(), Some("payments"));
        assert!(field("host").is_some_and(|h| !h.is_empty()));
        assert!(field("started").is_some_and(|s| s.parse::<u64>().is_ok()));
        let unnamed = Record::of_this_process("locks", "d2:abc", None);
        assert!(unnamed.fields.iter().all(|(f, _)| *f != "name"));
    }

    #[test]
    fn records_are_never_lock_keys() {
        // Lock keys are `<prefix>:{<name>}`: a record's key never has the `{` after the prefix.
        let key = record_key("distlock", "d2:0123");
        assert!(!key.starts_with("distlock:{"));
        const { assert!(REFRESH_EVERY.as_secs() * 3 <= RECORD_TTL.as_secs()) };
    }
}
