//! The eviction policy of a fenced store's server, read at its first write.

use ::redis::aio::ConnectionLike;
use ::redis::{RedisError, Value};

/// The server's `maxmemory-policy`: the first one that is not `noeviction` among every master
/// `INFO memory` answered for (all of a Cluster's), else `noeviction`; from `CONFIG GET` when
/// `INFO` is refused; `None` when both are. A connection that fails is an error, not an
/// unknown policy.
pub(super) async fn policy<C>(conn: &mut C) -> Result<Option<String>, RedisError>
where
    C: ConnectionLike + Send,
{
    let info: Result<Value, RedisError> = ::redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut *conn)
        .await;
    match info {
        Ok(reply) => {
            let mut seen = Seen::default();
            seen.walk(&reply);
            let worst = seen.policies.iter().find(|p| *p != "noeviction");
            match worst.or(seen.policies.first()) {
                // A master that refused is not known to be safe: ask `CONFIG GET` below.
                Some(policy) if !seen.refused => return Ok(Some(policy.clone())),
                _ => {}
            }
        }
        Err(error) if !answered(&error) => return Err(error),
        Err(_) => {}
    }
    // INFO refused (an ACL without `info`, a renamed command): CONFIG GET, one node's answer.
    let config: Result<std::collections::HashMap<String, String>, RedisError> =
        ::redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(conn)
            .await;
    match config {
        Ok(mut map) => Ok(map.remove("maxmemory-policy")),
        Err(error) if !answered(&error) => Err(error),
        Err(_) => Ok(None),
    }
}

/// True when the server answered with an error reply (refused the command), rather than the
/// connection failing.
fn answered(error: &RedisError) -> bool {
    error.code().is_some()
}

/// What an `INFO` reply says: one server's text, or a cluster connection's map of each
/// master's (where a master that refused is an error value, not an error).
#[derive(Default)]
struct Seen {
    /// Every `maxmemory_policy:` line's value.
    policies: Vec<String>,
    /// A master refused `INFO`.
    refused: bool,
}

impl Seen {
    fn walk(&mut self, reply: &Value) {
        let text = match reply {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::VerbatimString { text, .. } => text.clone(),
            Value::SimpleString(text) => text.clone(),
            Value::Array(items) | Value::Set(items) => {
                items.iter().for_each(|item| self.walk(item));
                return;
            }
            Value::Map(pairs) => {
                pairs.iter().for_each(|(_, item)| self.walk(item));
                return;
            }
            Value::ServerError(_) => {
                self.refused = true;
                return;
            }
            _ => return,
        };
        let lines = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("maxmemory_policy:"));
        self.policies.extend(lines.map(str::to_owned));
    }
}
