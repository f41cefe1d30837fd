//! How one request of the protocol goes out and comes back: a Lua script run by its SHA1
//! (`EVALSHA`, loaded again on `NOSCRIPT`), a request with its `WAIT` and its echoed id, and the
//! `Call` trait every typed call implements (its request, its id, the decoding of its reply).

use std::sync::OnceLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, Pipeline, RedisResult, ServerErrorKind, Value};

use crate::lease::millis_ceil;
use crate::wire::scripts::{
    ACQUIRE_ALL, ACQUIRE_FENCED, ACQUIRE_HANDED, ACQUIRE_PERMIT, ACQUIRE_QUEUED, ACQUIRE_READ,
    ACQUIRE_WRITE, CLIENT_RECORD, FENCE_FLOOR, LEADER_CANDIDATE, LEADER_CANDIDATES, LEADER_CURRENT,
    LEADER_PROCLAIM, LEAVE_QUEUE, RELEASE, RELEASE_MANY, RENEW,
};

/// A Lua script; its SHA1 is computed on first use.
///
/// redis-rs's `ScriptInvocation` does the same EVALSHA-then-reload, but copies every key and
/// argument into owned buffers and then again into a command on each call; the calls here build
/// their command once.
pub(crate) struct Lua {
    source: &'static str,
    sha: OnceLock<String>,
}

impl Lua {
    const fn new(source: &'static str) -> Self {
        Lua {
            source,
            sha: OnceLock::new(),
        }
    }

    /// An `EVALSHA` command with the script's hash; append `numkeys`, keys and args.
    pub(crate) fn evalsha(&self) -> Cmd {
        let sha = self
            .sha
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_owned());
        // Sized for a lock's scripts (a release: the SHA1, 4 keys, 7 arguments), so that
        // building one does not grow its buffers on the hot path.
        let mut cmd = redis::Cmd::with_capacity(16, 512);
        cmd.arg("EVALSHA").arg(sha);
        cmd
    }

    /// The `SCRIPT LOAD` command for this script.
    pub(crate) fn load(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }

    /// Runs `cmd` (built with [`Lua::evalsha`]); on NOSCRIPT loads the script and runs it again
    /// ([`Lua::reloaded`]).
    pub(crate) async fn run<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                let [reply] = self.reloaded(conn, cmd, None).await?;
                Ok(redis::from_redis_value(reply.extract_error()?)?)
            }
            other => other,
        }
    }

    /// `SCRIPT LOAD` and then `cmd` (built with [`Lua::evalsha`]) again, with the `WAIT` of
    /// `then` after it, in one write, up to [`RELOADS`] times while the script is still
    /// missing: for a call whose `EVALSHA` found it missing (Redis restarted, failed over or
    /// flushed its scripts). One write, so no other client's `SCRIPT FLUSH` comes between the
    /// two in practice (Redis runs a client's pipelined commands together); sent as two round
    /// trips, one did under flushes 20 ms apart. (`EVAL` with the source would be atomic, but a
    /// least-privilege user has only `EVALSHA` and `SCRIPT LOAD`.) Returns the replies after
    /// the load's: the load's error if it failed.
    async fn reloaded<const N: usize, C: ConnectionLike>(
        &self,
        conn: &mut C,
        cmd: &Cmd,
        then: Option<ReplicaWait>,
    ) -> RedisResult<[Value; N]> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(self.load());
        pipe.add_command(cmd.clone());
        if let Some(wait) = then {
            add_wait(&mut pipe, wait);
        }
        let mut attempt = 1;
        loop {
            let replies: Vec<Value> = pipe.query_async(conn).await?;
            let mut replies = replies.into_iter();
            replies.next().ok_or_else(wrong_shape)?.extract_error()?;
            let replies =
                <[Value; N]>::try_from(replies.collect::<Vec<_>>()).map_err(|_| wrong_shape())?;
            let missing = matches!(&replies[0], Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript));
            if !missing || attempt == RELOADS {
                return Ok(replies);
            }
            attempt += 1;
        }
    }
}

/// Loads of a script a call tries before its NOSCRIPT is an error (each in the same write as
/// the call sent again).
const RELOADS: usize = 3;

pub(crate) static ACQUIRE_FENCED_SCRIPT: Lua = Lua::new(ACQUIRE_FENCED);
pub(crate) static RELEASE_SCRIPT: Lua = Lua::new(RELEASE);
pub(crate) static RELEASE_MANY_SCRIPT: Lua = Lua::new(RELEASE_MANY);
pub(crate) static RENEW_SCRIPT: Lua = Lua::new(RENEW);
pub(crate) static FENCE_FLOOR_SCRIPT: Lua = Lua::new(FENCE_FLOOR);
pub(crate) static ACQUIRE_QUEUED_SCRIPT: Lua = Lua::new(ACQUIRE_QUEUED);
pub(crate) static LEAVE_QUEUE_SCRIPT: Lua = Lua::new(LEAVE_QUEUE);
pub(crate) static ACQUIRE_HANDED_SCRIPT: Lua = Lua::new(ACQUIRE_HANDED);
pub(crate) static ACQUIRE_PERMIT_SCRIPT: Lua = Lua::new(ACQUIRE_PERMIT);
pub(crate) static ACQUIRE_READ_SCRIPT: Lua = Lua::new(ACQUIRE_READ);
pub(crate) static LEADER_PROCLAIM_SCRIPT: Lua = Lua::new(LEADER_PROCLAIM);
pub(crate) static LEADER_CURRENT_SCRIPT: Lua = Lua::new(LEADER_CURRENT);
pub(crate) static LEADER_CANDIDATE_SCRIPT: Lua = Lua::new(LEADER_CANDIDATE);
pub(crate) static LEADER_CANDIDATES_SCRIPT: Lua = Lua::new(LEADER_CANDIDATES);
pub(crate) static ACQUIRE_WRITE_SCRIPT: Lua = Lua::new(ACQUIRE_WRITE);
pub(crate) static ACQUIRE_ALL_SCRIPT: Lua = Lua::new(ACQUIRE_ALL);
pub(crate) static CLIENT_RECORD_SCRIPT: Lua = Lua::new(CLIENT_RECORD);

/// Every script, for preloading at connect.
pub(crate) static ALL: [&Lua; 13] = [
    &ACQUIRE_FENCED_SCRIPT,
    &RELEASE_SCRIPT,
    &RELEASE_MANY_SCRIPT,
    &RENEW_SCRIPT,
    &FENCE_FLOOR_SCRIPT,
    &ACQUIRE_QUEUED_SCRIPT,
    &LEAVE_QUEUE_SCRIPT,
    &ACQUIRE_HANDED_SCRIPT,
    &ACQUIRE_PERMIT_SCRIPT,
    &ACQUIRE_READ_SCRIPT,
    &ACQUIRE_WRITE_SCRIPT,
    &ACQUIRE_ALL_SCRIPT,
    &CLIENT_RECORD_SCRIPT,
];

/// What goes on the wire for one call.
pub(crate) enum Request {
    /// A script call whose reply is `{request id, value}`.
    Script(&'static Lua, Cmd),
    /// Commands pipelined in one write, ending with `ECHO <request id>` (and, before it, the
    /// `WAIT` of the call's [`ReplicaWait`] if it has one): see [`finish_pipeline`].
    Pipeline(Pipeline),
}

/// `WAIT replicas timeout` after a call's write: how many replicas must acknowledge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
}

/// A reply as it came back: the echoed request id, the call's own reply, and how many replicas
/// acknowledged the write (when the call asked, with [`ReplicaWait`]).
pub(crate) struct Sent<T> {
    pub(crate) echoed: Value,
    pub(crate) raw: T,
    pub(crate) acked: Option<usize>,
}

impl Request {
    /// Sends the request, with a `WAIT` after the write when `wait` is given, all in one write
    /// (so in a cluster the `WAIT` goes with the key to the lock's own node, never broadcast).
    /// A pipeline carries its `WAIT` and `ECHO` already ([`finish_pipeline`]).
    pub(crate) async fn send<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        wait: Option<ReplicaWait>,
    ) -> RedisResult<Sent<T>> {
        match (self, wait) {
            (Request::Script(lua, cmd), None) => {
                let (echoed, raw) = lua.run(conn, cmd).await?;
                Ok(Sent {
                    echoed,
                    raw,
                    acked: None,
                })
            }
            (Request::Script(lua, cmd), Some(wait)) => {
                let mut pipe = redis::pipe();
                // A NOSCRIPT stays in the reply (the pair is sent again after the script's load).
                pipe.ignore_errors();
                pipe.add_command(cmd.clone());
                add_wait(&mut pipe, wait);
                let replies: Vec<Value> = pipe.query_async(conn).await?;
                let [reply, acked] = match <[Value; 2]>::try_from(replies)
                    .map_err(|_| wrong_shape())?
                {
                    [Value::ServerError(e), _] if e.kind() == Some(ServerErrorKind::NoScript) => {
                        lua.reloaded(conn, cmd, Some(wait)).await?
                    }
                    replies => replies,
                };
                let (echoed, raw) = redis::from_redis_value(reply.extract_error()?)?;
                Ok(Sent {
                    echoed,
                    raw,
                    acked: Some(redis::from_redis_value(acked.extract_error()?)?),
                })
            }
            (Request::Pipeline(pipe), wait) => {
                let mut replies: Vec<Value> = pipe.query_async(conn).await?;
                // An error reply is an error, except `WRONGTYPE`, which the call decodes (the
                // key holds something that is not a lock of this protocol), and `NOSCRIPT` (a
                // batch's release script, loaded and sent again by `batch`).
                if let Some(Value::ServerError(e)) = replies.iter().find(|v| {
                    matches!(v, Value::ServerError(e) if !matches!(e.code(), "WRONGTYPE" | "NOSCRIPT"))
                }) {
                    return Err(e.clone().into());
                }
                let echoed = replies.pop().unwrap_or(Value::Nil);
                let acked = match wait {
                    Some(_) => Some(redis::from_redis_value(
                        replies.pop().ok_or_else(wrong_shape)?,
                    )?),
                    None => None,
                };
                Ok(Sent {
                    echoed,
                    raw: redis::from_redis_value(Value::Array(replies))?,
                    acked,
                })
            }
        }
    }
}

fn add_wait(pipe: &mut Pipeline, wait: ReplicaWait) {
    pipe.cmd("WAIT")
        .arg(wait.replicas)
        .arg(millis_ceil(wait.timeout).max(1));
}

/// Ends a call's pipeline: its `WAIT` (if any), then `ECHO <request id>`, whose reply comes
/// last and says which request the replies answer.
pub(crate) fn finish_pipeline(mut pipe: Pipeline, wait: Option<ReplicaWait>, id: &[u8]) -> Request {
    if let Some(wait) = wait {
        add_wait(&mut pipe, wait);
    }
    pipe.cmd("ECHO").arg(id);
    Request::Pipeline(pipe)
}

/// True if `echoed` (the id a reply carries) is `id`: the reply answers this request.
pub(crate) fn echoes(echoed: &Value, id: &[u8]) -> bool {
    match echoed {
        Value::BulkString(bytes) => bytes == id,
        Value::SimpleString(text) => text.as_bytes() == id,
        _ => false,
    }
}

/// A reply with fewer parts than its request: it answers some other request.
fn wrong_shape() -> redis::RedisError {
    redis::RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "a pipelined reply has the wrong number of parts",
    ))
}

/// One typed call: its request, the request id its reply echoes, and the decoding of the rest
/// of the reply.
pub(crate) trait Call {
    /// The reply after the echoed id, as redis-rs reads it (owned: a RedLock master's reply
    /// may arrive in the background, after its call settled).
    type Raw: FromRedisValue + Send + 'static;
    /// The decoded reply.
    type Reply;
    /// The request to send.
    fn request(&self) -> Request;
    /// The id the reply must echo (a reply that echoes another answers another request).
    fn request_id(&self) -> &[u8];
    /// The replicas that must acknowledge this call's write (`WAIT`), if any.
    fn replica_wait(&self) -> Option<ReplicaWait> {
        None
    }
    /// The reply, or `None` if it is not one this call gets (a reply of the wrong shape).
    fn decode(&self, raw: Self::Raw) -> Option<Self::Reply>;
}
