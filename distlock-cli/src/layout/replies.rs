//! What Redis's replies to the listing's reads say: an owner's client id, a leader record, the
//! server's clock, a queue's length, subscriber counts, an identity record.

use std::collections::HashMap;

use distlock::redis::{self, Value};

use super::{LeaderRecord, Process, TAG};

/// The client id in a `d2` lock value (`d2:<client id>:<counter>` → `d2:<client id>`).
pub(super) fn owner_client_id(value: &str) -> Option<&str> {
    let rest = value.strip_prefix(TAG)?;
    let (id, counter) = rest.rsplit_once(':')?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id) && hex(counter)).then(|| &value[..TAG.len() + id.len()])
}

/// The leader record (`HMGET term identity since owner`) if it names the lock's `owner`.
pub(super) fn leader_record(reply: &Value, owner: &str) -> Option<LeaderRecord> {
    let Value::Array(fields) = reply else {
        return None;
    };
    let text = |i: usize| match fields.get(i) {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Some(Value::SimpleString(text)) => Some(text.clone()),
        _ => None,
    };
    if text(3)? != owner {
        return None;
    }
    Some(LeaderRecord {
        term: text(0)?.parse().ok()?,
        identity: text(1).unwrap_or_default(),
        since_ms: text(2)?.parse().ok()?,
    })
}

/// The server's clock in ms from a `TIME` reply.
pub(super) fn server_millis(reply: &Value) -> Option<u64> {
    let (secs, micros): (u64, u64) = redis::from_redis_value(reply.clone()).ok()?;
    Some(secs * 1000 + micros / 1000)
}

/// `ZCARD`'s reply: the entries of a lock's queue (0 for anything else).
pub(super) fn queued(reply: &Value) -> u64 {
    match reply {
        Value::Int(n) if *n > 0 => *n as u64,
        _ => 0,
    }
}

/// `PUBSUB NUMSUB`'s reply: channel → subscribers (a flat array in RESP2, a map in RESP3).
pub(super) fn subscriber_counts(reply: &Value) -> HashMap<String, u64> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let count = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Array(items) => items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter_map(|(k, v)| Some((text(k)?, count(v)?)))
        .collect()
}

/// An identity record from its `HGETALL` reply (`None` if there is none).
pub(super) fn process(reply: &Value) -> Option<Process> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let fields: HashMap<String, String> = match reply {
        Value::Array(items) => items
            .chunks_exact(2)
            .filter_map(|p| Some((text(&p[0])?, text(&p[1])?)))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        _ => return None,
    };
    if fields.is_empty() {
        return None;
    }
    let field = |name: &str| fields.get(name).cloned();
    Some(Process {
        host: field("host"),
        pid: field("pid").and_then(|p| p.parse().ok()),
        exe: field("exe"),
        client_name: field("name"),
        connected_unix: field("started").and_then(|s| s.parse().ok()),
        version: field("version"),
    })
}
