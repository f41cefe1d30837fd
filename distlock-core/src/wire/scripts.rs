//! The wire protocol: every request distlock sends to Redis, each as one typed call that places
//! its keys and arguments and decodes its reply into an enum. **Not public API**: the Lua
//! sources are visible (doc-hidden) only for the repository's tests and benchmarks.
//!
//! ## Protocol `d2`
//!
//! A lock is one string key, `prefix:{name}`, holding `d2:<owner>` (the protocol version, then
//! the acquisition's owner id) with the lease as its expiry. Everything else is on the client:
//! re-entrant holds are counted in the task chain that holds the lock (`context`), so a
//! re-entry neither writes a hold to Redis nor needs one released.
//!
//! * **Acquire** (`AcquireCall`): `SET lock d2:<owner> NX PX ttl GET` and `ECHO <request id>`
//!   pipelined: no Lua. The reply says fresh (nil), replay of our own acquire after a lost reply
//!   (our own value) or busy (another value); `PTTL` joins the pipeline when the caller waits.
//! * **Fenced acquire** (`FencedAcquireCall`, for locks that ask for a fencing token): one
//!   script that also raises the fence floor (`ACQUIRE_FENCED`).
//! * **RedLock acquire** (`QueuedAcquireCall`, over a RedLock quorum only, plain or fenced):
//!   one script (`ACQUIRE_QUEUED`) that takes a free lock only in its waiters' order, kept in
//!   two sorted sets next to the lock (`prefix:{name}:queue`: lock value → ticket;
//!   `:queue:until`: lock value → when the entry lapses), which expire with their last entry.
//!   A waiter that leaves without the lock takes its entry out (`LeaveQueueCall`,
//!   `LEAVE_QUEUE`). They add keys next to a `d2` lock and change nothing in it: a client that
//!   does not know them still excludes correctly (it only does not wait its turn), so the
//!   version tag stays `d2`. One server, a cluster and Sentinel never see them.
//! * **Re-entry check** (`RenewCall` with one lease): the outer hold is still ours, and its
//!   expiry reaches at least the inner hold's ttl.
//! * **Release** (`ReleaseCall`, `RELEASE`): compare and delete, then `PUBLISH` to wake waiters.
//!   Releases that arrive together go out as one `RELEASE_MANY` call (`ReleaseManyCall`), and
//!   acquires that arrive together share one pipeline and one `ECHO` (see `batch`).
//! * **Renewal** (`RenewCall`, `RENEW`): compare and extend, batched.
//!
//! A lock that asks for replica acknowledgement (`min_replicas`) gets `WAIT n timeout` after its
//! acquire or renewal in the same pipeline, so it runs on the connection (and, in a cluster, the
//! node) that wrote.
//!
//! Every reply answers with the request's id, so a reply that answers another request (a reply
//! lost on a connection that stayed open) is recognised. A key that holds anything else than a
//! `d2` lock (a lock of another distlock version, another program's key) is never misread: the
//! calls report it as incompatible.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, Pipeline, RedisResult, ServerErrorKind, Value};

use crate::lease::millis_ceil;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;

/// The protocol version every lock value starts with.
pub const VERSION_TAG: &str = "d2:";

/// Fenced acquire: take the lock and hand out a fencing token.
///
/// KEYS: lock, fence. ARGV: value (`d2:<owner>`), ttl ms, fence retention ms, request id.
/// Returns `{id, {1, token}}` (taken, or a replay of our own take), `{id, {0, pttl}}` (held by
/// another `d2` owner) or `{id, {2, 0}}` (the key holds something that is not a `d2` lock).
///
/// The token is the server's clock in microseconds, raised above the last token handed out for
/// this name (the fence floor, kept for the retention time, read and written by one
/// `SET ... GET`), so it strictly increases per name while the fence key stays bounded in
/// memory. A replay reads the floor back: nobody can have raised it while we hold the lock. A
/// fence key that does not hold a number is put back as it was (expiring after the retention)
/// and the script fails before it takes the lock.
pub const ACQUIRE_FENCED: &str = r#"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {ARGV[4], {2, 0}}
end
if v == false then
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local s = string.format('%d', token)
  local prev = redis.call('SET', KEYS[2], s, 'PX', ARGV[3], 'GET')
  local last = tonumber(prev or '0')
  if last == nil then
    redis.call('SET', KEYS[2], prev, 'PX', ARGV[3])
    return redis.error_reply('ERR distlock: the fence key ' .. KEYS[2] .. ' does not hold a number; delete it to use this lock')
  end
  if token <= last then
    token = last + 1
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {ARGV[4], {1, token}}
end
if v == ARGV[1] then
  return {ARGV[4], {1, tonumber(redis.call('GET', KEYS[2]) or '0') or 0}}
end
if string.sub(v, 1, 3) ~= 'd2:' then
  return {ARGV[4], {2, 0}}
end
return {ARGV[4], {0, redis.call('PTTL', KEYS[1])}}
"#;

/// Fence floor of a RedLock quorum's fenced acquire (see `redlock_fence`): read it, and raise
/// it to at least a given token.
///
/// KEYS: fence. ARGV: request id, token to raise the floor to (0: read only), retention ms.
/// Returns `{id, floor}` (the floor after the raise).
pub const FENCE_FLOOR: &str = r#"
local f = tonumber(redis.call('GET', KEYS[1]) or '0')
if f == nil then
  return redis.error_reply('ERR distlock: the fence key ' .. KEYS[1] .. ' does not hold a number; delete it to use this lock')
end
local to = tonumber(ARGV[2])
if to > f then
  redis.call('SET', KEYS[1], string.format('%d', to), 'PX', ARGV[3])
  f = to
end
return {ARGV[1], f}
"#;

/// How long the waiters ahead of a RedLock caller that found the lock free still have to take
/// their turn (see [`ACQUIRE_QUEUED`]): a live waiter is woken by the release within
/// milliseconds (or looks again every 250 ms when its subscription reached too few masters),
/// so this is what a waiter that went away can cost the lock after a release, at most.
pub(crate) const TURN_GRACE: Duration = Duration::from_millis(300);

/// Acquire over a RedLock quorum (plain or fenced), in the order the waiters came: the
/// `:queue` of the lock holds one entry per waiting acquire (its lock value), scored by its
/// ticket (the caller's clock in µs when the acquire started, the same on every master, so
/// every master agrees who comes first and the waiters no longer split the masters between
/// them); `:queue:until` holds when each entry lapses (this master's clock, ms).
///
/// KEYS: lock, fence, queue, queue until. ARGV: value (`d2:<owner>`), ttl ms, fence retention
/// ms (0: no fencing token), request id, ticket (0: the caller does not wait), grace ms
/// (`TURN_GRACE`, 300 ms), `1` to queue the caller (a waiter's attempts after it subscribed: one
/// that takes the lock at its first attempt leaves no entry behind) or `0`.
/// Returns `{id, {1, token, 0}}` (taken, or a replay of our own take; token 0 when not
/// fenced), `{id, {0, pttl, ahead}}` (held by another `d2` owner), `{id, {3, ms, ahead}}`
/// (free, but the `ahead` waiters queued before the caller come first: the first of them for
/// at most ms) or `{id, {2, 0, 0}}` (not a `d2` lock); `ahead` is 0 for a caller that does not
/// queue.
///
/// Lapsed entries are dropped first (no sweeper: the next call does it). A busy lock queues
/// the caller (if asked to) until the holder's pttl plus the grace: it tries again at the
/// release or at the pttl, and each attempt renews its entry. A free lock is taken only by the
/// caller with the lowest ticket present: one with waiters ahead is refused, gives those ahead
/// at most the grace more (so a waiter that went away holds the lock up that long at most) and
/// queues itself behind them. Taking removes the caller's entry; both keys expire with their
/// last entry. The queue only ever refuses a grant: exclusion rests on the lock key alone.
pub const ACQUIRE_QUEUED: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
if #lapsed > 0 then
  redis.call('ZREM', KEYS[3], unpack(lapsed))
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {ARGV[4], {2, 0, 0}}
end
local ticket = tonumber(ARGV[5])
local grace = tonumber(ARGV[6])
local function queue(ms)
  if ticket > 0 and ARGV[7] == '1' then
    redis.call('ZADD', KEYS[3], ticket, ARGV[1])
    redis.call('ZADD', KEYS[4], now + ms + grace, ARGV[1])
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    local keep = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', KEYS[3], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
local function fence_token(replay)
  if tonumber(ARGV[3]) == 0 then
    return 0
  end
  if replay then
    return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  end
  local tt = redis.call('TIME')
  local token = tonumber(tt[1]) * 1000000 + tonumber(tt[2])
  local prev = redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3], 'GET')
  local floor = tonumber(prev or '0')
  if floor == nil then
    redis.call('SET', KEYS[2], prev, 'PX', ARGV[3])
    return nil
  end
  if token <= floor then
    token = floor + 1
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
  end
  return token
end
if v == ARGV[1] then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {ARGV[4], {1, fence_token(true), 0}}
end
if v ~= false then
  if string.sub(v, 1, 3) ~= 'd2:' then
    return {ARGV[4], {2, 0, 0}}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl >= 0 then
    queue(pttl)
  else
    queue(1000)
  end
  local before = 0
  if ticket > 0 then
    before = redis.call('ZCOUNT', KEYS[3], '-inf', '(' .. ARGV[5])
  end
  return {ARGV[4], {0, pttl, before}}
end
local ahead
if ticket > 0 then
  ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[5])
else
  ahead = redis.call('ZRANGE', KEYS[3], 0, -1)
end
if #ahead > 0 then
  for i = 1, #ahead do
    redis.call('ZADD', KEYS[4], 'LT', now + grace, ahead[i])
  end
  local left = math.max(tonumber(redis.call('ZSCORE', KEYS[4], ahead[1])) - now, 1)
  queue(left)
  return {ARGV[4], {3, left, #ahead}}
end
local token = fence_token(false)
if token == nil then
  return redis.error_reply('ERR distlock: the fence key ' .. KEYS[2] .. ' does not hold a number; delete it to use this lock')
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[4], {1, token, 0}}
"#;

/// A RedLock waiter whose acquire ended (without the lock, or with it: see
/// `lock::queue::QueueEntry`) takes its entry out of the queue (see [`ACQUIRE_QUEUED`]), so
/// the waiters behind it need not wait out its grace.
///
/// KEYS: queue, queue until. ARGV: value (`d2:<owner>`), request id. Returns `{id, removed}`.
pub const LEAVE_QUEUE: &str = r#"
redis.call('ZREM', KEYS[2], ARGV[1])
return {ARGV[2], redis.call('ZREM', KEYS[1], ARGV[1])}
"#;

/// Release.
///
/// KEYS: lock, release channel. ARGV: value (`d2:<owner>`), request id, keep ms, and `s` for a
/// sharded release channel (a cluster: `SPUBLISH` reaches the subscribers of the lock's own
/// shard, where `PUBLISH` would be broadcast to every node).
/// Returns `{id, code}`: 0 released, -1 another owner holds it (nothing changed), -2 no lock (it
/// expired, or a replayed release already freed it), -3 the key is not a `d2` lock. With keep
/// ms > 0 (`min_hold` not reached yet) the lock is left to expire after keep ms instead of
/// being deleted; otherwise it is deleted and waiters are notified.
pub const RELEASE: &str = r#"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {ARGV[2], -3}
end
if v == false then
  return {ARGV[2], -2}
end
if v ~= ARGV[1] then
  if string.sub(v, 1, 3) ~= 'd2:' then
    return {ARGV[2], -3}
  end
  return {ARGV[2], -1}
end
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {ARGV[2], 0}
end
redis.call('DEL', KEYS[1])
if ARGV[4] == 's' then
  redis.call('SPUBLISH', KEYS[2], '1')
else
  redis.call('PUBLISH', KEYS[2], '1')
end
return {ARGV[2], 0}
"#;

/// Release several locks in one call (a batch of releases that arrived together, see `batch`).
///
/// KEYS: lock and release channel of each lock, in pairs. ARGV: the request id, `s` for
/// sharded release channels (else `-`), then for each lock its value (`d2:<owner>`) and keep
/// ms. Returns `{id, codes}` with one code per lock, as [`RELEASE`] returns it.
pub const RELEASE_MANY: &str = r#"
local out = {}
for i = 1, #KEYS / 2 do
  local lock = KEYS[2 * i - 1]
  local v = redis.pcall('GET', lock)
  if type(v) == 'table' then
    out[i] = -3
  elseif v == false then
    out[i] = -2
  elseif v ~= ARGV[2 * i + 1] then
    if string.sub(v, 1, 3) ~= 'd2:' then
      out[i] = -3
    else
      out[i] = -1
    end
  elseif tonumber(ARGV[2 * i + 2]) > 0 then
    redis.call('PEXPIRE', lock, ARGV[2 * i + 2])
    out[i] = 0
  else
    redis.call('DEL', lock)
    if ARGV[2] == 's' then
      redis.call('SPUBLISH', KEYS[2 * i], '1')
    else
      redis.call('PUBLISH', KEYS[2 * i], '1')
    end
    out[i] = 0
  end
end
return {ARGV[1], out}
"#;

/// Renew a batch of leases (and check a re-entry: a batch of one).
///
/// KEYS: lock keys. ARGV: the request id, then for each key its ttl ms and its value.
/// Returns `{id, statuses}` with one status per key: 1 ours (its expiry now reaches at least the
/// ttl), 0 gone, -1 another owner's, -2 not a `d2` lock. Renewal only ever extends a key's
/// expiry (never shortens one that another hold relies on), and one bad key does not fail the
/// others: each key is read with `pcall`.
pub const RENEW: &str = r#"
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    out[i] = -2
  elseif v == ARGV[2 * i + 1] then
    local ttl = tonumber(ARGV[2 * i])
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
    out[i] = 1
  elseif v == false then
    out[i] = 0
  elseif string.sub(v, 1, 3) ~= 'd2:' then
    out[i] = -2
  else
    out[i] = -1
  end
end
return {ARGV[1], out}
"#;

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
    fn evalsha(&self) -> Cmd {
        let sha = self
            .sha
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_owned());
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha);
        cmd
    }

    /// The `SCRIPT LOAD` command for this script.
    pub(crate) fn load(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }

    /// Runs `cmd` (built with [`Lua::evalsha`]); on NOSCRIPT loads the script and runs it again.
    async fn run<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        cmd: &Cmd,
    ) -> RedisResult<T> {
        match cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load().exec_async(conn).await?;
                cmd.query_async(conn).await
            }
            other => other,
        }
    }
}

static ACQUIRE_FENCED_SCRIPT: Lua = Lua::new(ACQUIRE_FENCED);
static RELEASE_SCRIPT: Lua = Lua::new(RELEASE);
static RELEASE_MANY_SCRIPT: Lua = Lua::new(RELEASE_MANY);
static RENEW_SCRIPT: Lua = Lua::new(RENEW);
static FENCE_FLOOR_SCRIPT: Lua = Lua::new(FENCE_FLOOR);
static ACQUIRE_QUEUED_SCRIPT: Lua = Lua::new(ACQUIRE_QUEUED);
static LEAVE_QUEUE_SCRIPT: Lua = Lua::new(LEAVE_QUEUE);

/// Every script, for preloading at connect.
pub(crate) static ALL: [&Lua; 7] = [
    &ACQUIRE_FENCED_SCRIPT,
    &RELEASE_SCRIPT,
    &RELEASE_MANY_SCRIPT,
    &RENEW_SCRIPT,
    &FENCE_FLOOR_SCRIPT,
    &ACQUIRE_QUEUED_SCRIPT,
    &LEAVE_QUEUE_SCRIPT,
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
                // A NOSCRIPT stays in the reply (the script is loaded and the pair sent again).
                pipe.ignore_errors();
                pipe.add_command(cmd.clone());
                add_wait(&mut pipe, wait);
                let mut replies: Vec<Value> = pipe.query_async(conn).await?;
                if matches!(replies.first(), Some(Value::ServerError(e)) if e.kind() == Some(ServerErrorKind::NoScript))
                {
                    lua.load().exec_async(conn).await?;
                    replies = pipe.query_async(conn).await?;
                }
                let [reply, acked] = <[Value; 2]>::try_from(replies).map_err(|_| wrong_shape())?;
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

/// What an acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken (or a replay of our own take after a lost reply); the fencing token if asked for.
    Taken { token: Option<u64> },
    /// Held by another owner; its remaining ttl in ms (-1: no expiry; `None`: not asked).
    /// Over a RedLock quorum also free but another waiter's turn first, for at most `pttl`.
    /// `pass`: release wakes the waiter lets pass before it retries, because the waiters
    /// queued ahead of it take those turns (RedLock; 0 elsewhere).
    Busy { pttl: Option<i64>, pass: u32 },
    /// The key holds something that is not a lock of this protocol.
    Incompatible,
}

/// A plain acquire: `SET NX PX GET` (and `PTTL` when the caller will wait), no script.
pub(crate) struct AcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The lock's value, `d2:<owner>`.
    pub(crate) owner: &'a ShortId,
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// Also ask for the holder's remaining ttl (the caller waits when the lock is busy).
    pub(crate) want_pttl: bool,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

impl Call for AcquireCall<'_> {
    type Raw = Vec<Value>;
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut pipe = redis::Pipeline::with_capacity(4);
        // Error replies stay in the reply (a `WRONGTYPE` says "not a lock of this protocol").
        pipe.ignore_errors();
        add_acquire(
            &mut pipe,
            self.keys,
            self.owner.as_bytes(),
            self.ttl,
            self.want_pttl,
        );
        finish_pipeline(pipe, self.wait, self.id)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, raw: Vec<Value>) -> Option<Acquired> {
        let mut raw = raw.into_iter();
        let acquired = decode_acquire(&mut raw, self.owner.as_bytes(), self.want_pttl)?;
        raw.next().is_none().then_some(acquired)
    }
}

/// Appends a plain acquire's commands to `pipe`: `SET lock value NX PX ttl GET`, and `PTTL
/// lock` when the caller will wait.
pub(crate) fn add_acquire(
    pipe: &mut Pipeline,
    keys: &LockKeys,
    value: &[u8],
    ttl: Duration,
    want_pttl: bool,
) {
    pipe.cmd("SET")
        .arg(keys.lock())
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(millis_ceil(ttl))
        .arg("GET");
    if want_pttl {
        pipe.cmd("PTTL").arg(keys.lock());
    }
}

/// Decodes a plain acquire's replies (taken from `raw`, as [`add_acquire`] asked for them) for
/// the lock value `value`; `None` if they are not replies to such a request.
pub(crate) fn decode_acquire(
    raw: &mut impl Iterator<Item = Value>,
    value: &[u8],
    want_pttl: bool,
) -> Option<Acquired> {
    let first = raw.next()?;
    // Both replies are taken before deciding, so a batch's next request starts at its own.
    let pttl = match want_pttl {
        true => Some(redis::from_redis_value::<i64>(raw.next()?).ok()?),
        false => None,
    };
    let previous = match first {
        // `SET ... GET` on a key of another type: a lock of an older distlock (a hash).
        Value::ServerError(e) if e.code() == "WRONGTYPE" => return Some(Acquired::Incompatible),
        Value::Nil => None,
        Value::BulkString(bytes) => Some(bytes),
        _ => return None,
    };
    Some(match previous {
        None => Acquired::Taken { token: None },
        Some(v) if v == value => Acquired::Taken { token: None },
        Some(v) if v.starts_with(VERSION_TAG.as_bytes()) => Acquired::Busy { pttl, pass: 0 },
        Some(_) => Acquired::Incompatible,
    })
}

/// An acquire that also hands out a fencing token ([`ACQUIRE_FENCED`]).
pub(crate) struct FencedAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// How long the fence floor is kept (at least the ttl).
    pub(crate) retention: Duration,
    /// Replicas that must acknowledge the take (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

impl Call for FencedAcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_FENCED_SCRIPT.evalsha();
        cmd.arg(2)
            .arg(self.keys.lock())
            .arg(self.keys.fence())
            .arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(millis_ceil(self.retention.max(self.ttl)))
            .arg(self.id);
        Request::Script(&ACQUIRE_FENCED_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<Acquired> {
        Some(match status {
            1 => Acquired::Taken {
                token: Some(u64::try_from(value).ok()?),
            },
            0 => Acquired::Busy {
                pttl: Some(value),
                pass: 0,
            },
            2 => Acquired::Incompatible,
            _ => return None,
        })
    }
}

/// [`ACQUIRE_QUEUED`]: an acquire over a RedLock quorum, plain or fenced, that takes a free
/// lock only in its waiters' order.
pub(crate) struct QueuedAcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: &'a [u8],
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    pub(crate) ttl: Duration,
    /// The fence floor's retention if the acquire hands out a fencing token.
    pub(crate) fenced: Option<Duration>,
    /// The caller's place in the queue (its clock in µs when the acquire started); 0: it does
    /// not wait, and queues nowhere.
    pub(crate) ticket: u64,
    /// Queue the caller (a waiter's attempts after it subscribed); otherwise the ticket only
    /// says whether waiters are ahead of it.
    pub(crate) queue: bool,
}

impl Call for QueuedAcquireCall<'_> {
    type Raw = (i64, i64, i64);
    type Reply = Acquired;

    fn request(&self) -> Request {
        let mut cmd = ACQUIRE_QUEUED_SCRIPT.evalsha();
        let retention = self.fenced.map_or(0, |r| millis_ceil(r.max(self.ttl)));
        cmd.arg(4)
            .arg(self.keys.lock())
            .arg(self.keys.fence())
            .arg(self.keys.queue())
            .arg(self.keys.queue_until())
            .arg(self.value)
            .arg(millis_ceil(self.ttl))
            .arg(retention)
            .arg(self.id)
            .arg(self.ticket)
            .arg(millis_ceil(TURN_GRACE))
            .arg(if self.queue { "1" } else { "0" });
        Request::Script(&ACQUIRE_QUEUED_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, (status, value, ahead): (i64, i64, i64)) -> Option<Acquired> {
        let ahead = u32::try_from(ahead).ok()?;
        Some(match status {
            1 if self.fenced.is_some() => Acquired::Taken {
                token: Some(u64::try_from(value).ok()?),
            },
            1 => Acquired::Taken { token: None },
            // Held: each waiter ahead takes a turn after a release, then it is ours.
            0 => Acquired::Busy {
                pttl: Some(value),
                pass: ahead,
            },
            // Free, the first of those ahead taking it now (no release before its turn).
            3 => Acquired::Busy {
                pttl: Some(value),
                pass: ahead.saturating_sub(1),
            },
            2 => Acquired::Incompatible,
            _ => return None,
        })
    }
}

/// [`LEAVE_QUEUE`]: a RedLock waiter whose acquire ended leaves the queue.
pub(crate) struct LeaveQueueCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// `d2:<owner>`: the entry.
    pub(crate) value: &'a [u8],
    pub(crate) id: &'a [u8],
}

impl Call for LeaveQueueCall<'_> {
    type Raw = i64;
    /// True if the entry was there.
    type Reply = bool;

    fn request(&self) -> Request {
        let mut cmd = LEAVE_QUEUE_SCRIPT.evalsha();
        cmd.arg(2)
            .arg(self.keys.queue())
            .arg(self.keys.queue_until())
            .arg(self.value)
            .arg(self.id);
        Request::Script(&LEAVE_QUEUE_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, removed: i64) -> Option<bool> {
        Some(removed > 0)
    }
}

/// [`FENCE_FLOOR`]: read a lock's fence floor, or raise it to at least `raise_to`.
pub(crate) struct FenceFloorCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) id: &'a [u8],
    /// The token to raise the floor to (0: read only).
    pub(crate) raise_to: u64,
    /// How long the fence floor is kept.
    pub(crate) retention: Duration,
}

impl Call for FenceFloorCall<'_> {
    type Raw = i64;
    /// The floor (after the raise).
    type Reply = u64;

    fn request(&self) -> Request {
        let mut cmd = FENCE_FLOOR_SCRIPT.evalsha();
        cmd.arg(1)
            .arg(self.keys.fence())
            .arg(self.id)
            .arg(self.raise_to)
            .arg(millis_ceil(self.retention));
        Request::Script(&FENCE_FLOOR_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, floor: i64) -> Option<u64> {
        u64::try_from(floor).ok()
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Released (or left to expire at `min_hold`).
    Yes,
    /// The lock is held by another owner: nothing changed.
    OtherOwner,
    /// No lock: it expired (or a replayed release already freed it).
    Absent,
    /// The key is not a lock of this protocol: nothing changed.
    Incompatible,
}

/// [`RELEASE`] of a lock.
pub(crate) struct ReleaseCall<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The lock's value, `d2:<owner>`.
    pub(crate) owner: &'a ShortId,
    /// The request id (unique within the client).
    pub(crate) id: &'a [u8],
    /// `min_hold` not reached yet: leave the lock to expire after this long (zero: delete it).
    pub(crate) keep: Duration,
    /// Notify waiters through sharded pub/sub (a cluster).
    pub(crate) sharded: bool,
}

impl Call for ReleaseCall<'_> {
    type Raw = i64;
    type Reply = Released;

    fn request(&self) -> Request {
        let mut cmd = RELEASE_SCRIPT.evalsha();
        cmd.arg(2)
            .arg(self.keys.lock())
            .arg(self.keys.channel())
            .arg(self.owner.as_bytes())
            .arg(self.id)
            .arg(millis_ceil(self.keep))
            .arg(if self.sharded { "s" } else { "-" });
        Request::Script(&RELEASE_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, code: i64) -> Option<Released> {
        released(code)
    }
}

/// The meaning of a release script's code.
fn released(code: i64) -> Option<Released> {
    Some(match code {
        0 => Released::Yes,
        -1 => Released::OtherOwner,
        -2 => Released::Absent,
        -3 => Released::Incompatible,
        _ => return None,
    })
}

/// One lock of a [`ReleaseManyCall`].
#[derive(Clone)]
pub(crate) struct ReleaseItem {
    pub(crate) keys: LockKeys,
    /// `d2:<owner>`.
    pub(crate) value: ShortId,
    /// `min_hold` not reached yet: leave the lock to expire after this long (zero: delete it).
    pub(crate) keep: Duration,
}

/// [`RELEASE_MANY`] of several locks (standalone Redis: their keys need not share a slot).
pub(crate) struct ReleaseManyCall<'a> {
    pub(crate) id: &'a [u8],
    pub(crate) items: &'a [ReleaseItem],
}

impl ReleaseManyCall<'_> {
    /// The `EVALSHA` command (also sent inside a batch's pipeline).
    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = RELEASE_MANY_SCRIPT.evalsha();
        cmd.arg(self.items.len() * 2);
        for item in self.items {
            cmd.arg(item.keys.lock()).arg(item.keys.channel());
        }
        cmd.arg(self.id).arg("-");
        for item in self.items {
            cmd.arg(item.value.as_bytes()).arg(millis_ceil(item.keep));
        }
        cmd
    }

    /// Decodes the script's reply (`{id, codes}`): one result per lock, or `None` if the
    /// reply answers another request.
    pub(crate) fn decode_reply(&self, reply: Value) -> Option<Vec<Released>> {
        let (echoed, codes): (Value, Vec<i64>) = redis::from_redis_value(reply).ok()?;
        if !echoes(&echoed, self.id) {
            return None;
        }
        self.decode(codes)
    }
}

impl Call for ReleaseManyCall<'_> {
    type Raw = Vec<i64>;
    type Reply = Vec<Released>;

    fn request(&self) -> Request {
        Request::Script(&RELEASE_MANY_SCRIPT, self.command())
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, codes: Vec<i64>) -> Option<Vec<Released>> {
        if codes.len() != self.items.len() {
            return None;
        }
        codes.into_iter().map(released).collect()
    }
}

/// One lease in a [`RenewCall`].
#[derive(Debug, Clone)]
pub(crate) struct RenewItem {
    pub(crate) key: Arc<str>,
    /// `d2:<owner>`.
    pub(crate) value: Arc<str>,
    pub(crate) ttl: Duration,
}

/// [`RENEW`] of a batch of leases.
pub(crate) struct RenewCall<'a> {
    pub(crate) id: &'a [u8],
    pub(crate) items: &'a [RenewItem],
    /// Replicas that must acknowledge the renewal (`min_replicas`).
    pub(crate) wait: Option<ReplicaWait>,
}

/// What [`RENEW`] found for one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Still ours: the expiry reaches at least the ttl now (it was never shortened).
    Yes,
    /// The key is gone (expired, evicted, deleted).
    Gone,
    /// Another owner holds it.
    OtherOwner,
    /// The key is no lock of this protocol any more (overwritten).
    NotALock,
    /// RedLock, in a renewal batch: the masters that answered neither renewed it by majority
    /// nor put it out of a majority's reach, and those that did not answer could tip it (see
    /// `quorum`). A failed renewal of this lock alone; never a reply of one master.
    Undecided,
}

impl Call for RenewCall<'_> {
    type Raw = Vec<i64>;
    type Reply = Vec<Renewed>;

    fn request(&self) -> Request {
        let mut cmd = RENEW_SCRIPT.evalsha();
        cmd.arg(self.items.len());
        for item in self.items {
            cmd.arg(&*item.key);
        }
        cmd.arg(self.id);
        for item in self.items {
            cmd.arg(millis_ceil(item.ttl)).arg(&*item.value);
        }
        Request::Script(&RENEW_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, statuses: Vec<i64>) -> Option<Vec<Renewed>> {
        if statuses.len() != self.items.len() {
            return None;
        }
        statuses
            .into_iter()
            .map(|status| match status {
                1 => Some(Renewed::Yes),
                0 => Some(Renewed::Gone),
                -1 => Some(Renewed::OtherOwner),
                -2 => Some(Renewed::NotALock),
                _ => None,
            })
            .collect()
    }
}
