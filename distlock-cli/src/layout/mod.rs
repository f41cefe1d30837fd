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

use std::collections::{BTreeSet, HashMap};

use distlock::redis::aio::MultiplexedConnection;
use distlock::redis::{self, RedisError, Value};
use serde::Serialize;

mod replies;

use replies::{leader_record, owner_client_id, process, queued, server_millis, subscriber_counts};

/// The protocol tag every lock value starts with.
const TAG: &str = "d2:";

/// Longest lock name the runtime accepts, in bytes.
const MAX_NAME_LEN: usize = distlock::MAX_NAME_LEN;

/// How many locks one pipeline reads.
const PAGE: usize = 200;

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

/// The outcome of a forced release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Deleted; the release channel's message reached this many subscribed clients.
    Deleted { woken_clients: u64 },
    /// The lock no longer had the owner that was shown: nothing changed.
    ChangedHands,
}

/// Deletes the lock if it still has the owner the operator saw (marked by its waiters or not,
/// `d2:<owner>+`), and wakes its waiters as the runtime's own release does when someone waits
/// (one `PUBLISH` on the release channel). A semaphore's holders
/// (several owners) are removed from its sorted set, those still there; the key goes with the
/// last of them.
///
/// KEYS: lock, release channel. ARGV: the owners. Returns `{removed, woken}` (`{0, 0}`: none
/// of them holds it any more).
const FORCE_RELEASE: &str = r#"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' or not (redis.call('ZSCORE', KEYS[1], 'd2:permits') or redis.call('ZSCORE', KEYS[1], 'd2:readers')) then
    return {0, 0}
  end
  local removed = redis.call('ZREM', KEYS[1], unpack(ARGV))
  if removed == 0 then
    return {0, 0}
  end
  if redis.call('ZCARD', KEYS[1]) <= 1 then
    redis.call('DEL', KEYS[1])
  end
  return {removed, redis.call('PUBLISH', KEYS[2], '1')}
end
if v ~= ARGV[1] and v ~= ARGV[1] .. '+' then
  return {0, 0}
end
redis.call('DEL', KEYS[1])
return {1, redis.call('PUBLISH', KEYS[2], '1')}
"#;

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

    /// The names of the lock keys matching the glob `names` (`SCAN`, never `KEYS`), sorted, and
    /// the keys that matched but cannot be a lock's (their names contain braces).
    pub(crate) async fn scan(
        &self,
        conn: &mut MultiplexedConnection,
        names: &str,
    ) -> Result<(Vec<String>, Vec<NotALock>), RedisError> {
        let pattern = self.key_pattern(names);
        let mut found = BTreeSet::new();
        let mut odd = BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await?;
            for key in keys {
                let key = String::from_utf8_lossy(&key).into_owned();
                match self.name_of_key(&key) {
                    Some(name) => found.insert(name),
                    None => odd.insert(key),
                };
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let odd = odd
            .into_iter()
            .map(|key| NotALock {
                key,
                holds: "a key whose name cannot be a lock name (it has braces inside)".to_owned(),
            })
            .collect();
        Ok((found.into_iter().collect(), odd))
    }

    /// The held locks whose names match the glob `names`, and the keys among them that are not
    /// locks, each sorted.
    pub(crate) async fn read_matching(
        &self,
        conn: &mut MultiplexedConnection,
        names: &str,
    ) -> Result<(Vec<Lock>, Vec<NotALock>), RedisError> {
        let (names, mut not_locks) = self.scan(conn, names).await?;
        let mut locks = Vec::new();
        for (_, entry) in self.read(conn, &names).await? {
            match entry {
                Entry::Lock(lock) => locks.push(*lock),
                Entry::Semaphore(holders) => locks.extend(holders),
                Entry::NotALock(odd) => not_locks.push(odd),
                Entry::Free => {}
            }
        }
        not_locks.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((locks, not_locks))
    }

    /// Reads the lock (or semaphore) of every name in `names`, in order, in pages of [`PAGE`]:
    /// two round trips per page (the keys, then the identity records of their owners).
    pub(crate) async fn read(
        &self,
        conn: &mut MultiplexedConnection,
        names: &[String],
    ) -> Result<Vec<(String, Entry)>, RedisError> {
        let mut out = Vec::with_capacity(names.len());
        for page in names.chunks(PAGE) {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            // The server's clock, which a semaphore's deadlines are in.
            pipe.cmd("TIME");
            for name in page {
                let key = self.lock_key(name);
                pipe.cmd("GET").arg(&key);
                pipe.cmd("TYPE").arg(&key);
                pipe.cmd("PTTL").arg(&key);
                pipe.cmd("GET").arg(self.fence_key(name));
                pipe.cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES");
                pipe.cmd("HMGET")
                    .arg(self.leader_key(name))
                    .arg(&["term", "identity", "since", "owner"]);
                pipe.cmd("ZCARD").arg(self.queue_key(name));
            }
            pipe.cmd("PUBSUB").arg("NUMSUB");
            for name in page {
                pipe.arg(self.channel(name));
            }
            let replies: Vec<Value> = pipe.query_async(conn).await?;
            // A read refused (an ACL) fails the command; the counts of CLIENTS (last) do not.
            crate::server::refused(&replies[..replies.len().saturating_sub(1)])?;
            let numsub = replies.last().map(subscriber_counts).unwrap_or_default();
            let now_ms = replies.first().and_then(server_millis).unwrap_or(0);
            let mut owners = Vec::new();
            for (name, reply) in page.iter().zip(replies[1..].chunks_exact(7)) {
                let entry = self.entry(name, reply, &numsub, now_ms);
                match &entry {
                    Entry::Lock(lock) => owners.push(lock.client_id.clone()),
                    Entry::Semaphore(holders) => {
                        owners.extend(holders.iter().map(|h| h.client_id.clone()))
                    }
                    _ => {}
                }
                out.push((name.clone(), entry));
            }
            let records = self.records(conn, owners).await?;
            for (_, entry) in out.iter_mut().rev().take(page.len()) {
                let holders = match entry {
                    Entry::Lock(lock) => std::slice::from_mut(&mut **lock),
                    Entry::Semaphore(holders) => &mut holders[..],
                    _ => continue,
                };
                for lock in holders {
                    lock.process = records.get(&lock.client_id).cloned();
                }
            }
        }
        Ok(out)
    }

    /// One lock from its `GET`, `TYPE`, `PTTL`, fence `GET`, `ZRANGE` and leader record
    /// `HMGET` replies (`now_ms`: the server's clock).
    fn entry(
        &self,
        name: &str,
        reply: &[Value],
        numsub: &HashMap<String, u64>,
        now_ms: u64,
    ) -> Entry {
        let key = self.lock_key(name);
        let not_a_lock = |holds: String| {
            Entry::NotALock(NotALock {
                key: key.clone(),
                holds,
            })
        };
        let value = match &reply[0] {
            Value::Nil => return Entry::Free,
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::SimpleString(text) => text.clone(),
            // WRONGTYPE: not a string.
            _ => {
                let kind = match &reply[1] {
                    Value::SimpleString(kind) => kind.clone(),
                    Value::Okay => "status".to_owned(),
                    _ => "an unknown type".to_owned(),
                };
                if kind == "zset" {
                    if let Some(holders) = self.holders(name, reply, numsub, now_ms) {
                        return holders;
                    }
                }
                return not_a_lock(describe_type(&kind));
            }
        };
        // A lock its waiters marked (`d2:<owner>+`) is its owner's all the same.
        let value = match value.strip_suffix(distlock::scripts::WAITERS_MARK) {
            Some(unmarked) => unmarked.to_owned(),
            None => value,
        };
        let Some(client_id) = owner_client_id(&value) else {
            return not_a_lock(describe_string(&value));
        };
        let ttl_ms = match &reply[2] {
            Value::Int(ms) if *ms >= 0 => Some(*ms as u64),
            Value::Int(-2) => return Entry::Free,
            _ => None,
        };
        let fencing_token = match &reply[3] {
            Value::BulkString(bytes) => {
                std::str::from_utf8(bytes).ok().and_then(|t| t.parse().ok())
            }
            _ => None,
        };
        let leader = leader_record(&reply[5], &value);
        Entry::Lock(Box::new(Lock {
            name: name.to_owned(),
            key: key.clone(),
            client_id: client_id.to_owned(),
            leader,
            owner: value,
            process: None,
            ttl_ms,
            fencing_token,
            queued: queued(&reply[6]),
            waiting_clients: numsub.get(&self.channel(name)).copied().unwrap_or(0),
            permits: None,
            readers: None,
            set: Vec::new(),
        }))
    }

    /// A semaphore's live holders from its sorted set (`reply[4]`), or `None` if the set is
    /// not a `d2` semaphore.
    fn holders(
        &self,
        name: &str,
        reply: &[Value],
        numsub: &HashMap<String, u64>,
        now_ms: u64,
    ) -> Option<Entry> {
        let members: Vec<(String, f64)> = redis::from_redis_value(reply[4].clone()).ok()?;
        // A semaphore's count, or `None` for readers; neither marker: not a `d2` set.
        let of = members
            .iter()
            .find(|(member, _)| member == PERMITS_MEMBER || member == READERS_MEMBER)
            .map(|(member, score)| (member == PERMITS_MEMBER).then_some(-score as u32))?;
        let live: Vec<(&str, u64)> = members
            .iter()
            .filter(|(member, _)| member != PERMITS_MEMBER && member != READERS_MEMBER)
            .filter(|&&(_, deadline)| deadline > now_ms as f64)
            .map(|(member, deadline)| (member.as_str(), (*deadline as u64).saturating_sub(now_ms)))
            .collect();
        if live.is_empty() {
            return Some(Entry::Free);
        }
        let fencing_token = match &reply[3] {
            Value::BulkString(bytes) => {
                std::str::from_utf8(bytes).ok().and_then(|t| t.parse().ok())
            }
            _ => None,
        };
        let in_use = live.len() as u32;
        let holders = live
            .into_iter()
            .map(|(owner, ttl_ms)| Lock {
                name: name.to_owned(),
                key: self.lock_key(name),
                client_id: owner_client_id(owner).unwrap_or(owner).to_owned(),
                owner: owner.to_owned(),
                process: None,
                ttl_ms: Some(ttl_ms),
                fencing_token,
                queued: queued(&reply[6]),
                waiting_clients: numsub.get(&self.channel(name)).copied().unwrap_or(0),
                permits: of.map(|of| Permits { in_use, of }),
                readers: of.is_none().then_some(in_use),
                leader: None,
                set: Vec::new(),
            })
            .collect();
        Some(Entry::Semaphore(holders))
    }

    /// The identity records of `client_ids`, by client id (absent ones left out).
    async fn records(
        &self,
        conn: &mut MultiplexedConnection,
        client_ids: Vec<String>,
    ) -> Result<HashMap<String, Process>, RedisError> {
        let ids: Vec<String> = client_ids
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for id in &ids {
            pipe.cmd("HGETALL").arg(self.record_key(id));
        }
        let replies: Vec<Value> = pipe.query_async(conn).await?;
        Ok(ids
            .into_iter()
            .zip(replies)
            .filter_map(|(id, reply)| Some((id, process(&reply)?)))
            .collect())
    }

    /// Deletes the lock `name` if `owners` (its one owner; a semaphore's holders) still hold
    /// it, and wakes its waiters.
    pub(crate) async fn force_release(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        owners: &[&str],
    ) -> Result<Released, RedisError> {
        let (deleted, woken): (i64, u64) = redis::Script::new(FORCE_RELEASE)
            .key(self.lock_key(name))
            .key(self.channel(name))
            .arg(owners)
            .invoke_async(conn)
            .await?;
        Ok(if deleted > 0 {
            Released::Deleted {
                woken_clients: woken,
            }
        } else {
            Released::ChangedHands
        })
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
