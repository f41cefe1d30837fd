//! The one place that knows how a lock looks in Redis: key names, the lock's value, the client
//! identity records, and the compare-and-delete a forced release runs. When the wire protocol
//! changes, this module (and its tests) is what changes.
//!
//! Protocol `d2` (see `distlock-core/src/wire/scripts/` and `keys.rs`), for a lock named `order:42`
//! under the prefix `distlock`:
//!
//! * `distlock:{order:42}` — a string `d2:<client id>:<counter>` (the owner), with the lease as
//!   its expiry; re-entrant holds are counted by the holder and are not in Redis;
//! * `distlock:{order:42}:fence` — the last fencing token handed out for the name (kept for the
//!   fence retention after the last fenced acquisition);
//! * `distlock:{order:42}:released` — the channel a release publishes on (waiters subscribe);
//! * `distlock:{order:42}:queue` and `distlock:{order:42}:queue:until` — over a RedLock quorum,
//!   the waiters' queue (sorted sets: each waiting acquire's lock value scored by its ticket,
//!   and by when its entry lapses); on one server, Sentinel and a cluster, `:queue` alone holds
//!   a plain lock's waiters, to whom a release hands the lock (each scored by a ticket that
//!   carries its arrival and its grant window); not locks, so `Layout::name_of_key` and the
//!   `SCAN` pattern (names end at the `}`) pass them by; a forced release deletes the lock and
//!   wakes them, and the first of them takes it;
//! * a semaphore (`distlock::semaphore`) lies at the lock key instead as a sorted set: one
//!   member per holder (its owner, `d2:<client id>:<counter>`) scored by its lease deadline
//!   (the server's clock, ms), and the member `d2:permits` scored `-n` (its `n` permits); the
//!   key expires with the latest lease; holders whose deadline passed are no longer holders;
//! * shared (read) holds (`lock(name).read()`) lie there the same way, the member `d2:readers`
//!   (scored `-1`) in place of the count; `prefix:{name}:writer` holds the value of a writer
//!   waiting for them (its intent, expiring within a second unless renewed), not a lock;
//! * `distlock:client:<client id>` — the client's identity record, a hash of `host`, `pid`,
//!   `exe`, `name`, `started` (Unix seconds) and `version`, expiring unless refreshed.
//!
//! On a Redis Cluster a lock's keys share its slot (the braces are the hash tag), so one
//! master holds all of them and its release channel is a sharded one (`SPUBLISH`, counted by
//! `PUBSUB SHARDNUMSUB` on that master); an identity record lives in the slot of its own key.
//! Submodules: `scan` (finding the locks, on every master), `read` (reading them),
//! `replies` (what the replies say), `release` (the forced release).

use std::collections::HashMap;

use serde::Serialize;

mod read;
mod release;
mod replies;
mod scan;

pub(crate) use release::Released;
pub(crate) use scan::Found;

#[cfg(test)]
use replies::{owner_client_id, subscriber_counts};

/// The protocol tag every lock value starts with.
const TAG: &str = "d2:";

/// Longest lock name the runtime accepts, in bytes.
const MAX_NAME_LEN: usize = distlock::MAX_NAME_LEN;

/// How many locks one pipeline reads (one server).
const PAGE: usize = 200;

/// How many pipelines are in flight at once on a cluster (one lock, or one record, each).
const PARALLEL: usize = 32;

/// The keys and channels under one key prefix.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    prefix: String,
}

/// A lock that is held, as Redis has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Lock {
    /// The name users pass to `lock(..)` (or the rendered key template).
    pub(crate) name: String,
    /// Its Redis key.
    pub(crate) key: String,
    /// The owner: the lock's value, `d2:<client id>:<counter>`.
    pub(crate) owner: String,
    /// The owner's client id (the owner without its counter).
    pub(crate) client_id: String,
    /// The process of the owner's client, if its identity record is there.
    pub(crate) process: Option<Process>,
    /// Milliseconds until the lease runs out; `None` if the key has no expiry.
    pub(crate) ttl_ms: Option<u64>,
    /// Why the owner's identity record could not be read (a cluster's node that holds it did
    /// not answer); `None` when it was read, or is not there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) process_unread: Option<String>,
    /// The last fencing token handed out for the name (the holder's, if it asked for one).
    pub(crate) fencing_token: Option<u64>,
    /// Waiting acquires queued for the lock in Redis: one per call (a client's further calls
    /// for a lock it holds itself wait inside the client, for its own release, and are not
    /// counted here until then).
    pub(crate) queued: u64,
    /// Connections subscribed to the lock's release channel: one per client with waiters.
    pub(crate) waiting_clients: u64,
    /// A semaphore's holder: the permits in use and the semaphore's count (`None`: a lock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<Permits>,
    /// A shared (read) holder: the readers holding the lock (`None`: not a reader).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) readers: Option<u32>,
    /// The leader of the election of this name (`distlock::leader`) whose lock this is: its
    /// record names this owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leader: Option<LeaderRecord>,
    /// A lock of a set taken together (`lock_all`, `key = [...]`): the names of every lock of
    /// the set (the locks held with this one's owner value), sorted; empty for a lock alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) set: Vec<String>,
}

/// Marks the locks of `locks` that belong to a set taken together: a set's locks are plain
/// locks holding one owner value (see the wire protocol's "Sets of locks"), so the locks of
/// `all` (every lock held) with a lock's owner are its set.
pub(crate) fn mark_sets(locks: &mut [Lock], all: &[Lock]) {
    let mut by_owner: HashMap<&str, Vec<String>> = HashMap::new();
    for lock in all
        .iter()
        .filter(|l| l.permits.is_none() && l.readers.is_none())
    {
        by_owner
            .entry(&lock.owner)
            .or_default()
            .push(lock.name.clone());
    }
    for lock in locks
        .iter_mut()
        .filter(|l| l.permits.is_none() && l.readers.is_none())
    {
        if let Some(names) = by_owner.get(lock.owner.as_str()).filter(|n| n.len() > 1) {
            let mut names = names.clone();
            names.sort();
            lock.set = names;
        }
    }
}

/// A leader election's record (`prefix:{name}:leader`) naming a lock's owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LeaderRecord {
    /// The leader's term (its fencing token).
    pub(crate) term: u64,
    /// What the leader said it is.
    pub(crate) identity: String,
    /// When the term started, Unix ms (the server's clock).
    pub(crate) since_ms: u64,
}

/// The permits of a semaphore one holder belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Permits {
    /// Holders whose lease has not run out.
    pub(crate) in_use: u32,
    /// The semaphore's count, as its holders agreed it.
    pub(crate) of: u32,
}

/// The member of a semaphore's sorted set that holds its count (scored `-n`).
const PERMITS_MEMBER: &str = "d2:permits";

/// The member of a sorted set of readers that marks it (scored `-1`).
const READERS_MEMBER: &str = "d2:readers";

/// Which process a client belongs to (its identity record).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Process {
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    /// The program's file name.
    pub(crate) exe: Option<String>,
    /// The name the client was installed under (`install_as`).
    pub(crate) client_name: Option<String>,
    /// When the client connected, in Unix seconds.
    pub(crate) connected_unix: Option<u64>,
    /// The distlock version of the client.
    pub(crate) version: Option<String>,
}

/// A key under the prefix that has a lock's name but does not hold a lock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NotALock {
    pub(crate) key: String,
    /// What the key holds instead (`a hash`, `a string that is not a distlock lock`, ...).
    pub(crate) holds: String,
}

/// What one lock key holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    Lock(Box<Lock>),
    /// A semaphore's live holders (at least one), in deadline order.
    Semaphore(Vec<Lock>),
    NotALock(NotALock),
    /// Nothing: the lock is free (or was released while being read).
    Free,
}

impl Layout {
    pub(crate) fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.to_owned(),
        }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn lock_key(&self, name: &str) -> String {
        format!("{}:{{{name}}}", self.prefix)
    }

    fn fence_key(&self, name: &str) -> String {
        format!("{}:{{{name}}}:fence", self.prefix)
    }

    /// The waiting acquires' queue (a sorted set, one entry per waiting call).
    fn queue_key(&self, name: &str) -> String {
        format!("{}:{{{name}}}:queue", self.prefix)
    }

    fn leader_key(&self, name: &str) -> String {
        format!("{}:{{{name}}}:leader", self.prefix)
    }

    fn channel(&self, name: &str) -> String {
        format!("{}:{{{name}}}:released", self.prefix)
    }

    fn record_key(&self, client_id: &str) -> String {
        format!("{}:client:{client_id}", self.prefix)
    }

    /// The `SCAN MATCH` pattern of the lock keys whose names match the glob `names`.
    pub(crate) fn key_pattern(&self, names: &str) -> String {
        format!("{}:{{{names}}}", glob_escape(&self.prefix))
    }

    /// The `PSUBSCRIBE` pattern of the release channels of the names matching the glob `names`.
    pub(crate) fn channel_pattern(&self, names: &str) -> String {
        format!("{}:{{{names}}}:released", glob_escape(&self.prefix))
    }

    /// The lock name in a key `SCAN` returned for [`Layout::key_pattern`] (`None` for a key
    /// whose name could not be a lock's: the fence key of a name that ends in `}`, ...).
    pub(crate) fn name_of_key(&self, key: &str) -> Option<String> {
        let name = key
            .strip_prefix(&self.prefix)?
            .strip_prefix(":{")?
            .strip_suffix('}')?;
        check_name(name).ok().map(|()| name.to_owned())
    }

    /// The lock name of a release channel.
    pub(crate) fn name_of_channel(&self, channel: &str) -> Option<String> {
        self.name_of_key(channel.strip_suffix(":released")?)
    }
}

/// Why `name` cannot be a lock name (the runtime's rules: not empty, at most 1024 bytes, no
/// braces).
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        Err("a lock name cannot be empty".to_owned())
    } else if name.len() > MAX_NAME_LEN {
        Err(format!("a lock name is at most {MAX_NAME_LEN} bytes"))
    } else if name.contains(['{', '}']) {
        Err("a lock name cannot contain `{` or `}` (distlock puts the name in braces itself; a key template escapes them in values)".to_owned())
    } else {
        Ok(())
    }
}

/// Why `pattern` cannot match lock names (a glob is fine, braces are not).
pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.contains(['{', '}']) {
        Err("a name pattern cannot contain `{` or `}`: no lock name does".to_owned())
    } else if pattern.is_empty() {
        Err("a name pattern cannot be empty (`*` matches every name)".to_owned())
    } else {
        Ok(())
    }
}

/// The owner shortened for a table: the first 8 digits of its client id and its counter.
pub(crate) fn short_owner(owner: &str) -> String {
    match owner
        .strip_prefix(TAG)
        .and_then(|rest| rest.rsplit_once(':'))
    {
        Some((id, counter)) if id.len() > 8 => format!("{}…:{counter}", &id[..8]),
        _ => owner.to_owned(),
    }
}

fn describe_type(kind: &str) -> String {
    match kind {
        "hash" => "a hash (distlock before protocol d2 kept locks in hashes)".to_owned(),
        "list" | "set" | "zset" | "stream" => format!("a {kind}"),
        other => format!("a value of type `{other}`"),
    }
}

fn describe_string(value: &str) -> String {
    let version = value.split_once(':').map(|(tag, _)| tag).filter(|tag| {
        tag.len() > 1 && tag.starts_with('d') && tag[1..].bytes().all(|b| b.is_ascii_digit())
    });
    match version {
        Some(tag) if tag != "d2" => format!(
            "a lock of distlock protocol `{tag}`, which this CLI does not read (it reads `d2`): use the CLI of that distlock version"
        ),
        _ => "a string that is not a distlock lock".to_owned(),
    }
}

/// `text` with the glob characters of `SCAN MATCH` and `PSUBSCRIBE` escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::redis::Value;

    #[test]
    fn keys_and_names_round_trip() {
        let layout = Layout::new("distlock");
        assert_eq!(layout.lock_key("order:42"), "distlock:{order:42}");
        assert_eq!(layout.channel("order:42"), "distlock:{order:42}:released");
        assert_eq!(
            layout.name_of_key("distlock:{order:42}").as_deref(),
            Some("order:42")
        );
        assert_eq!(
            layout
                .name_of_channel("distlock:{order:42}:released")
                .as_deref(),
            Some("order:42")
        );
        // What a `*` in the pattern can match besides a lock key.
        assert_eq!(layout.name_of_key("distlock:{a}:fence}"), None);
        assert_eq!(layout.name_of_key("other:{a}"), None);
        assert_eq!(layout.record_key("d2:ab"), "distlock:client:d2:ab");
    }

    #[test]
    fn patterns_escape_the_prefix_but_not_the_names() {
        let layout = Layout::new("app*[1]");
        assert_eq!(layout.key_pattern("order:*"), r"app\*\[1\]:{order:*}");
        assert_eq!(layout.channel_pattern("*"), r"app\*\[1\]:{*}:released");
    }

    #[test]
    fn owners() {
        let owner = "d2:0123456789abcdef0123456789abcdef:1b";
        assert_eq!(
            owner_client_id(owner),
            Some("d2:0123456789abcdef0123456789abcdef")
        );
        assert_eq!(short_owner(owner), "01234567…:1b");
        for bad in ["d2:", "d2:abc", "d3:ab:1", "x:ab:1", "d2:zz:1", "d2:ab:"] {
            assert_eq!(owner_client_id(bad), None, "{bad}");
        }
        assert!(describe_string("d3:ab:1").contains("protocol `d3`"));
        assert_eq!(
            describe_string("hello"),
            "a string that is not a distlock lock"
        );
    }

    #[test]
    fn names_and_patterns() {
        assert!(check_name("order:42").is_ok());
        assert!(check_name("a{b}").unwrap_err().contains("`{` or `}`"));
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(1025)).is_err());
        assert!(check_pattern("order:*").is_ok());
        assert!(check_pattern("{x}").is_err());
    }

    #[test]
    fn numsub_in_both_protocols() {
        let chan = |c: &str| Value::BulkString(c.as_bytes().to_vec());
        let resp2 = Value::Array(vec![chan("a"), Value::Int(2), chan("b"), Value::Int(0)]);
        let resp3 = Value::Map(vec![(chan("a"), Value::Int(2)), (chan("b"), Value::Int(0))]);
        for reply in [resp2, resp3] {
            let counts = subscriber_counts(&reply);
            assert_eq!(counts.get("a"), Some(&2));
            assert_eq!(counts.get("b"), Some(&0));
        }
    }
}
