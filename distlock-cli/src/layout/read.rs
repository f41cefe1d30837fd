//! Reading locks: each name's keys in one pipeline (on one server, a page of names at a time;
//! on a Redis Cluster, each name on the master of its slot), what their replies say, and the
//! identity records of their owners.

use std::collections::{BTreeSet, HashMap};

use distlock::redis::{self, RedisError, Value};
use futures_util::stream::{self, StreamExt, TryStreamExt};

use super::replies::{
    leader_record, owner_client_id, process, queued, server_millis, subscriber_counts,
};
use super::{
    describe_string, describe_type, Entry, Layout, Lock, NotALock, Permits, Process, PAGE,
    PARALLEL, PERMITS_MEMBER, READERS_MEMBER,
};
use crate::cluster::Connection;

/// An owner's identity record, or why it could not be read.
type Record = Result<Process, String>;

impl Layout {
    /// Reads the lock (or semaphore) of every name in `names`, in order, then the identity
    /// records of their owners. On one server, in pages of [`PAGE`]: one pipeline per page, and
    /// one for the records. On a cluster, one pipeline per name (its keys share a slot: the
    /// master of that slot answers it), [`PARALLEL`] at a time, and each record where it lives.
    pub(crate) async fn read(
        &self,
        conn: &mut Connection,
        names: &[String],
    ) -> Result<Vec<(String, Entry)>, RedisError> {
        let (size, parallel) = match conn.is_cluster() {
            true => (1, PARALLEL),
            false => (PAGE, 1),
        };
        let pages: Vec<Vec<(String, Entry)>> = stream::iter(names.chunks(size))
            .map(|page| {
                let mut conn = conn.clone();
                async move { self.read_page(&mut conn, page).await }
            })
            .buffered(parallel)
            .try_collect()
            .await?;
        let mut out: Vec<(String, Entry)> = pages.into_iter().flatten().collect();
        let owners = out.iter().flat_map(|(_, entry)| match entry {
            Entry::Lock(lock) => vec![lock.client_id.clone()],
            Entry::Semaphore(holders) => holders.iter().map(|h| h.client_id.clone()).collect(),
            _ => Vec::new(),
        });
        let records = self.records(conn, owners.collect()).await?;
        for (_, entry) in &mut out {
            let holders = match entry {
                Entry::Lock(lock) => std::slice::from_mut(&mut **lock),
                Entry::Semaphore(holders) => &mut holders[..],
                _ => continue,
            };
            for lock in holders {
                match records.get(&lock.client_id) {
                    Some(Ok(process)) => lock.process = Some(process.clone()),
                    Some(Err(why)) => lock.process_unread = Some(why.clone()),
                    None => {}
                }
            }
        }
        Ok(out)
    }

    /// The seven reads of one lock, in the order [`Layout::entry`] takes their replies.
    fn reads(&self, name: &str) -> [redis::Cmd; 7] {
        let key = self.lock_key(name);
        [
            redis::cmd("GET").arg(&key).clone(),
            redis::cmd("TYPE").arg(&key).clone(),
            redis::cmd("PTTL").arg(&key).clone(),
            redis::cmd("GET").arg(self.fence_key(name)).clone(),
            redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .clone(),
            redis::cmd("HMGET")
                .arg(self.leader_key(name))
                .arg(&["term", "identity", "since", "owner"])
                .clone(),
            redis::cmd("ZCARD").arg(self.queue_key(name)).clone(),
        ]
    }

    /// The locks of `page` in one pipeline: the server's clock, seven reads a name, and the
    /// subscribers of their release channels (sharded channels on a cluster). On a cluster, a
    /// redirect among the replies (`MOVED`: the slot moved since the connection learned the
    /// slots; `ASK`: it is moving, this key already gone) has the name's reads sent again one
    /// by one, each following its redirect; a redirect is never taken for a lock or for a key
    /// that is not one.
    async fn read_page(
        &self,
        conn: &mut Connection,
        page: &[String],
    ) -> Result<Vec<(String, Entry)>, RedisError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        // The server's clock, which a semaphore's deadlines are in.
        pipe.cmd("TIME");
        for name in page {
            for read in self.reads(name) {
                pipe.add_command(read);
            }
        }
        // Sharded channels are counted by the node of their slot, this pipeline's.
        let numsub = if conn.is_cluster() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        pipe.cmd("PUBSUB").arg(numsub);
        for name in page {
            pipe.arg(self.channel(name));
        }
        let redirected = |error: &RedisError| matches!(error.code(), Some("MOVED" | "ASK"));
        let read: Result<Vec<Value>, RedisError> = pipe.query_async(conn).await;
        let replies = match (read, page) {
            (Ok(replies), [name]) if conn.is_cluster() && first_redirect(&replies).is_some() => {
                self.read_alone(conn, name).await?
            }
            (Err(error), [name]) if conn.is_cluster() && redirected(&error) => {
                self.read_alone(conn, name).await?
            }
            (replies, _) => replies?,
        };
        if let Some(redirect) = first_redirect(&replies) {
            return Err(redirect);
        }
        // A read refused (an ACL) fails the command; the counts of CLIENTS (last) do not.
        crate::server::refused(&replies[..replies.len().saturating_sub(1)])?;
        let numsub = replies.last().map(subscriber_counts).unwrap_or_default();
        let now_ms = replies.first().and_then(server_millis).unwrap_or(0);
        page.iter()
            .zip(replies[1..].chunks_exact(7))
            .map(|(name, reply)| Ok((name.clone(), self.entry(name, reply, &numsub, now_ms)?)))
            .collect()
    }

    /// One lock from its `GET`, `TYPE`, `PTTL`, fence `GET`, `ZRANGE` and leader record
    /// `HMGET` replies (`now_ms`: the server's clock).
    fn entry(
        &self,
        name: &str,
        reply: &[Value],
        numsub: &HashMap<String, u64>,
        now_ms: u64,
    ) -> Result<Entry, RedisError> {
        let key = self.lock_key(name);
        let not_a_lock = |holds: String| {
            Entry::NotALock(NotALock {
                key: key.clone(),
                holds,
            })
        };
        let value = match &reply[0] {
            Value::Nil => return Ok(Entry::Free),
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::SimpleString(text) => text.clone(),
            // Not a string: only then, and only with the type this server gave it, is the key
            // something else than a lock. Any other error (a redirect, a node that failed) is
            // the read's failure.
            Value::ServerError(error) if error.code() == "WRONGTYPE" => {
                let kind = match &reply[1] {
                    Value::SimpleString(kind) => kind.clone(),
                    Value::ServerError(error) => return Err(error.clone().into()),
                    other => return Err(unexpected("TYPE", other)),
                };
                if kind == "zset" {
                    if let Some(holders) = self.holders(name, reply, numsub, now_ms) {
                        return Ok(holders);
                    }
                }
                return Ok(not_a_lock(describe_type(&kind)));
            }
            Value::ServerError(error) => return Err(error.clone().into()),
            other => return Err(unexpected("GET", other)),
        };
        // A lock its waiters marked (`d2:<owner>+`) is its owner's all the same.
        let value = match value.strip_suffix(distlock::scripts::WAITERS_MARK) {
            Some(unmarked) => unmarked.to_owned(),
            None => value,
        };
        let Some(client_id) = owner_client_id(&value) else {
            return Ok(not_a_lock(describe_string(&value)));
        };
        let ttl_ms = match &reply[2] {
            Value::Int(ms) if *ms >= 0 => Some(*ms as u64),
            Value::Int(-2) => return Ok(Entry::Free),
            _ => None,
        };
        let fencing_token = match &reply[3] {
            Value::BulkString(bytes) => {
                std::str::from_utf8(bytes).ok().and_then(|t| t.parse().ok())
            }
            _ => None,
        };
        let leader = leader_record(&reply[5], &value);
        Ok(Entry::Lock(Box::new(Lock {
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
            process_unread: None,
        })))
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
                process_unread: None,
            })
            .collect();
        Some(Entry::Semaphore(holders))
    }

    /// The replies of [`Layout::read_page`] for one name of a cluster, each command sent alone:
    /// each follows its own redirect (`ASKING` first for an `ASK`), as a pipeline cannot. The
    /// subscribers are counted over every node (the sum of `PUBSUB SHARDNUMSUB`: only the
    /// lock's shard has any); 0 if a node does not answer.
    async fn read_alone(
        &self,
        conn: &mut Connection,
        name: &str,
    ) -> Result<Vec<Value>, RedisError> {
        let mut replies = vec![redis::cmd("TIME").query_async::<Value>(conn).await?];
        for read in self.reads(name) {
            replies.push(match read.query_async::<Value>(conn).await {
                Ok(reply) => reply,
                Err(error) => server_error(&error).ok_or(error)?,
            });
        }
        let numsub = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(self.channel(name))
            .query_async::<Value>(conn)
            .await;
        replies.push(numsub.unwrap_or(Value::Nil));
        Ok(replies)
    }

    /// The identity records of `client_ids`, by client id (absent ones left out; on a
    /// cluster, each read on the master of its slot, and one that could not be read says why).
    async fn records(
        &self,
        conn: &mut Connection,
        client_ids: Vec<String>,
    ) -> Result<HashMap<String, Record>, RedisError> {
        let ids: Vec<String> = client_ids
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let (size, parallel) = match conn.is_cluster() {
            true => (1, PARALLEL),
            false => (PAGE, 1),
        };
        let pages: Vec<Vec<(String, Option<Record>)>> = stream::iter(ids.chunks(size))
            .map(|page| {
                let mut conn = conn.clone();
                async move {
                    let mut pipe = redis::pipe();
                    pipe.ignore_errors();
                    for id in page {
                        pipe.cmd("HGETALL").arg(self.record_key(id));
                    }
                    let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
                        Ok(replies) => replies,
                        // One record's node: its owners' PROCESS cannot be known.
                        Err(error) if conn.is_cluster() => {
                            let why = Err(error.to_string());
                            return Ok(vec![(page[0].clone(), Some(why))]);
                        }
                        Err(error) => return Err(error),
                    };
                    Ok(page
                        .iter()
                        .cloned()
                        .zip(replies)
                        .map(|(id, reply)| match &reply {
                            Value::ServerError(error) if error.code() != "NOPERM" => {
                                (id, Some(Err(RedisError::from(error.clone()).to_string())))
                            }
                            _ => (id, process(&reply).map(Ok)),
                        })
                        .collect())
                }
            })
            .buffered(parallel)
            .try_collect()
            .await?;
        Ok(pages
            .into_iter()
            .flatten()
            .filter_map(|(id, record)| Some((id, record?)))
            .collect())
    }
}

/// The first redirect among a pipeline's replies (the node does not serve the slot).
fn first_redirect(replies: &[Value]) -> Option<RedisError> {
    replies.iter().find_map(|reply| match reply {
        Value::ServerError(e) if matches!(e.code(), "MOVED" | "ASK") => Some(e.clone().into()),
        _ => None,
    })
}

/// A server's error reply as the reply a pipeline keeps in place (`WRONGTYPE`, ...); `None`
/// for a failure of the connection.
fn server_error(error: &RedisError) -> Option<Value> {
    let code = error.code()?;
    let detail = error
        .detail()
        .unwrap_or_default()
        .replace(['\r', '\n'], " ");
    redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes())
        .ok()
        .filter(|reply| matches!(reply, Value::ServerError(_)))
}

/// A reply of a kind `command` never gives.
fn unexpected(command: &str, reply: &Value) -> RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{command} answered {reply:?}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    /// The replies of one name's seven reads, all `reply` but `TYPE`'s.
    fn replies(get: Value, kind: Value) -> Vec<Value> {
        let mut replies = vec![get, kind];
        replies.extend(std::iter::repeat_n(Value::Nil, 5));
        replies
    }

    #[test]
    fn a_redirect_is_never_a_key_of_another_type() {
        let layout = Layout::new("distlock");
        let numsub = HashMap::new();
        for redirect in [
            "MOVED 9871 127.0.0.1:31012",
            "ASK 9871 127.0.0.1:31012",
            "CLUSTERDOWN The cluster is down",
        ] {
            let reply = replies(error(redirect), error(redirect));
            let read = layout.entry("payment-gateway", &reply, &numsub, 0);
            let failure = read.expect_err(redirect);
            assert_eq!(failure.code(), redirect.split(' ').next());
            assert!(first_redirect(&reply).is_some() || redirect.starts_with("CLUSTERDOWN"));
        }
        // A string's GET with TYPE failing: not a type the CLI read itself either.
        let wrongtype = error("WRONGTYPE Operation against a key holding the wrong kind of value");
        let reply = replies(wrongtype.clone(), error("MOVED 1 127.0.0.1:1"));
        assert!(layout.entry("a", &reply, &numsub, 0).is_err());
        // Only a type read from the key itself makes it something else than a lock.
        let reply = replies(wrongtype, Value::SimpleString("hash".to_owned()));
        match layout.entry("a", &reply, &numsub, 0) {
            Ok(Entry::NotALock(odd)) => assert!(odd.holds.starts_with("a hash"), "{odd:?}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_server_error_is_kept_as_a_reply() {
        let moved = redis::parse_redis_value(b"-MOVED 9871 127.0.0.1:31012\r\n")
            .unwrap()
            .extract_error()
            .unwrap_err();
        let kept = server_error(&moved).unwrap();
        assert!(first_redirect(&[kept]).is_some());
    }
}
