//! Where a lock lives: what the node the CLI reached says it is (`HELLO`), and the connection
//! that sends each lock's reads to the server holding it: the one server, or on a Redis
//! Cluster the master of the lock's slot (routed by slot, `MOVED` and `ASK` followed), with the
//! masters a listing scans one by one (`CLUSTER SLOTS`).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use distlock::redis::aio::{ConnectionLike, MultiplexedConnection};
use distlock::redis::cluster::ClusterClientBuilder;
use distlock::redis::cluster_async::ClusterConnection;
use distlock::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use distlock::redis::{self, Cmd, Pipeline, RedisFuture, RedisResult, Value};
use serde::Serialize;

/// A connection that reads each key where it lives.
#[derive(Clone)]
pub(crate) enum Connection {
    /// One server (or the master Sentinel named).
    Server(MultiplexedConnection),
    /// A Redis Cluster: each command (a pipeline: its first key) goes to the master of its
    /// key's slot, and release channels are sharded (`SPUBLISH`, `PUBSUB SHARDNUMSUB`).
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Server(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Server(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Server(conn) => conn.get_db(),
            Connection::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A master of a Redis Cluster, as `CLUSTER SLOTS` names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub(crate) struct Node {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Connection {
    /// A cluster's: release channels are sharded, keys are spread over masters.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// The masters serving slots now, sorted (`CLUSTER SLOTS`; none on one server).
    pub(crate) async fn masters(&mut self) -> RedisResult<Vec<Node>> {
        match self {
            Connection::Server(_) => Ok(Vec::new()),
            Connection::Cluster(conn) => {
                let reply = conn
                    .route_command(
                        redis::cmd("CLUSTER").arg("SLOTS").clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                    )
                    .await?;
                Ok(slot_masters(&reply))
            }
        }
    }

    /// `cmd` on `node` (a cluster's master), or on the one server (`None`).
    pub(crate) async fn on_node<T: redis::FromRedisValue>(
        &mut self,
        node: Option<&Node>,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match (self, node) {
            (Connection::Cluster(conn), Some(node)) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: node.host.clone(),
                    port: node.port,
                });
                Ok(redis::from_redis_value(
                    conn.route_command(cmd.clone(), routing).await?,
                )?)
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }
}

/// The masters in a `CLUSTER SLOTS` reply: the first node of each slot range.
pub(crate) fn slot_masters(reply: &Value) -> Vec<Node> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let masters: BTreeSet<Node> = ranges
        .iter()
        .filter_map(|range| match range {
            Value::Array(fields) => match fields.get(2)? {
                Value::Array(node) => {
                    let host = text(node.first()?)?;
                    let port = match node.get(1)? {
                        Value::Int(port) => u16::try_from(*port).ok()?,
                        _ => return None,
                    };
                    (!host.is_empty()).then_some(Node { host, port })
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    masters.into_iter().collect()
}

/// What a server is, as its `HELLO` says (`mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Standalone,
    Cluster,
    Sentinel,
}

/// What a server says of itself: its mode and whether it is a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) mode: Mode,
    pub(crate) replica: bool,
}

/// `HELLO` without a protocol version: the server's properties, the protocol unchanged. Every
/// user may run it (Redis checks no permission for it), so no ACL grant is needed; `None` from
/// a server that does not know it (before Redis 6).
pub(crate) async fn hello(conn: &mut MultiplexedConnection) -> Option<Hello> {
    let reply: Value = redis::cmd("HELLO").query_async(conn).await.ok()?;
    Some(parse_hello(&reply))
}

fn parse_hello(reply: &Value) -> Hello {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Array(items) => items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    };
    let fields: HashMap<String, String> = pairs
        .into_iter()
        .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
        .collect();
    let mode = match fields.get("mode").map(String::as_str) {
        Some("cluster") => Mode::Cluster,
        Some("sentinel") => Mode::Sentinel,
        _ => Mode::Standalone,
    };
    let replica = matches!(
        fields.get("role").map(String::as_str),
        Some("replica" | "slave")
    );
    Hello { mode, replica }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// A connection to the cluster the `seeds` belong to (each a node's URL, credentials and
/// scheme of the first used for every node). Redirects are followed a few times, each call
/// bounded by `response_timeout`.
pub(crate) async fn connect(
    seeds: &[String],
    connect_timeout: Duration,
    response_timeout: Duration,
) -> RedisResult<ClusterConnection> {
    ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .retries(4)
        .min_retry_wait(10)
        .max_retry_wait(200)
        .build()?
        .get_async_connection()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn hello_in_both_protocols() {
        let resp2 = Value::Array(vec![
            bulk("server"),
            bulk("redis"),
            bulk("proto"),
            Value::Int(2),
            bulk("mode"),
            bulk("cluster"),
            bulk("role"),
            bulk("master"),
        ]);
        assert_eq!(
            parse_hello(&resp2),
            Hello {
                mode: Mode::Cluster,
                replica: false
            }
        );
        let resp3 = Value::Map(vec![
            (bulk("mode"), bulk("standalone")),
            (bulk("role"), bulk("replica")),
        ]);
        assert_eq!(
            parse_hello(&resp3),
            Hello {
                mode: Mode::Standalone,
                replica: true
            }
        );
    }

    #[test]
    fn masters_of_the_slot_ranges() {
        let range = |lo: i64, hi: i64, port: i64, replica: i64| {
            Value::Array(vec![
                Value::Int(lo),
                Value::Int(hi),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(replica), bulk("id")]),
            ])
        };
        let reply = Value::Array(vec![
            range(10923, 16383, 7002, 7005),
            range(0, 5460, 7000, 7003),
            range(5461, 10922, 7001, 7004),
            range(16000, 16001, 7000, 7003),
        ]);
        let shown: Vec<String> = slot_masters(&reply).iter().map(Node::to_string).collect();
        assert_eq!(
            shown,
            ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]
        );
    }
}
