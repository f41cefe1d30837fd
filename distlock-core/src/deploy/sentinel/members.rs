//! The replicas `min_replicas = ALL_REPLICAS` waits for: the members of the connected master's
//! replica set, read from `SENTINEL REPLICAS` (see `Sentinels::count_healthy`).

use std::collections::HashSet;

use redis::Value;

/// The replicas of one master that `ALL_REPLICAS` waits for (see [`Sentinels::count_healthy`]).
pub(super) struct Members {
    pub(super) master: (String, u16),
    /// Every replica (`ip:port`) seen healthy since the client connected to this master.
    pub(super) names: HashSet<String>,
    /// The members the sentinels still list and do not consider down (at least one).
    pub(super) count: usize,
}

impl Members {
    pub(super) fn updated(mut self, listed: &[ReplicaEntry]) -> Members {
        for entry in listed.iter().filter(|e| e.healthy) {
            self.names.insert(entry.name.clone());
        }
        let counted = listed
            .iter()
            .filter(|e| self.names.contains(&e.name) && !e.down)
            .count();
        self.count = counted.max(1);
        self
    }
}

/// One entry of `SENTINEL REPLICAS` (a map in RESP3, a flat field list in RESP2).
pub(super) struct ReplicaEntry {
    /// `ip:port`.
    pub(super) name: String,
    /// Listed as a replica, not down or disconnected, reporting itself as one, link up.
    pub(super) healthy: bool,
    /// The sentinels consider it down (it cannot be promoted).
    pub(super) down: bool,
}

impl ReplicaEntry {
    pub(super) fn read(entry: &Value) -> Option<ReplicaEntry> {
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let fields: Vec<(String, String)> = match entry {
            Value::Map(pairs) => pairs
                .iter()
                .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
                .collect(),
            Value::Array(flat) => flat
                .chunks(2)
                .filter_map(|pair| Some((text(pair.first()?)?, text(pair.get(1)?)?)))
                .collect(),
            _ => return None,
        };
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let flags = field("flags").unwrap_or_default();
        Some(ReplicaEntry {
            name: field("name")?.to_owned(),
            healthy: flags == "slave"
                && field("role-reported") == Some("slave")
                && field("master-link-status") == Some("ok"),
            down: flags.split(',').any(|f| f == "s_down" || f == "o_down"),
        })
    }
}
