//! The Lua scripts (the wire protocol): every key through KEYS, every value through ARGV,
//! invoked by EVALSHA and reloaded on NOSCRIPT. **Not public API**: the sources are visible
//! (doc-hidden) only for the repository's tests and benchmarks.
//!
//! Each script has one typed call here ([`AcquireCall`], [`ReleaseCall`], [`RenewCall`]) that
//! places its KEYS and ARGV and decodes its reply into an enum; nothing else in the crate knows
//! a script's argument order or reply codes.
//!
//! The lock is a hash: field `o` is the owner id, `f` the fencing token, and one field per hold
//! (`h<id>`) makes the hold count. Holds are fields rather than a counter so that a retried
//! acquire or release (after a lost reply) is idempotent: setting or deleting the same field
//! twice changes nothing.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind};

use crate::keys::LockKeys;
use crate::lease::millis_ceil;

/// Acquire or re-enter.
///
/// KEYS: lock, fence. ARGV: owner, hold field, ttl ms, fence retention ms, re-entry flag
/// (`1` when the caller's call chain holds this lock already, else `0`).
/// Returns `{hold, {1, token}}` (fresh), `{hold, {2, token}}` (re-entry), `{hold, {0, pttl}}`
/// (held by another owner) or `{hold, {3, 0}}` (a re-entry found no lock: the outer hold was
/// lost, and the lock is not re-created under it). Every reply starts with the request's id
/// (here the hold field) so the client can tell a reply that answers another request.
///
/// The fencing token is the server's clock in microseconds, raised above the last token handed
/// out for this name (kept in the fence key for the retention time, read and written by one
/// `SET ... GET`), so it strictly increases per name while the fence key stays bounded in
/// memory. A fence key that does not hold a number (written by someone else) is put back as it
/// was, expiring after the retention, and the script fails without taking the lock.
///
/// A re-entry only ever extends the lock's expiry: an outer hold may rely on a longer one.
/// A replayed request (same hold field, after a lost reply) changes nothing and reports what
/// the first one did.
pub const ACQUIRE: &str = r#"
local owner = redis.call('HGET', KEYS[1], 'o')
if owner == false then
  if ARGV[5] == '1' then
    return {ARGV[2], {3, 0}}
  end
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local s = string.format('%d', token)
  local prev = redis.call('SET', KEYS[2], s, 'PX', ARGV[4], 'GET')
  local last = tonumber(prev or '0')
  if last == nil then
    redis.call('SET', KEYS[2], prev, 'PX', ARGV[4])
    return redis.error_reply('ERR distlock: the fence key ' .. KEYS[2] .. ' does not hold a number; delete it to use this lock')
  end
  if token <= last then
    token = last + 1
    s = string.format('%d', token)
    redis.call('SET', KEYS[2], s, 'PX', ARGV[4])
  end
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'f', s, ARGV[2], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {ARGV[2], {1, token}}
end
if owner == ARGV[1] then
  local status = 2
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 and redis.call('HLEN', KEYS[1]) == 3 then
    status = 1
  end
  redis.call('HSET', KEYS[1], ARGV[2], '1')
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return {ARGV[2], {status, tonumber(redis.call('HGET', KEYS[1], 'f'))}}
end
return {ARGV[2], {0, redis.call('PTTL', KEYS[1])}}
"#;

/// Release one hold.
///
/// KEYS: lock, channel. ARGV: owner, hold field, keep ms (optional, default 0).
/// Returns `{hold, code}`: -2 (no lock: it expired, or a replayed release already freed it),
/// -1 (another owner holds it: nothing changed), 0 (released) or the number of holds left
/// (re-entrant holds remain). When the last hold goes and keep ms is positive (`min_hold` not
/// reached yet), the lock is not deleted but left to expire after keep ms, holding no holds;
/// otherwise it is deleted and waiters are notified. A replay (the hold field is already gone)
/// changes nothing.
pub const RELEASE: &str = r#"
local found = redis.call('HMGET', KEYS[1], 'o', ARGV[2])
if found[1] == false then
  return {ARGV[2], -2}
end
if found[1] ~= ARGV[1] then
  return {ARGV[2], -1}
end
local left = redis.call('HLEN', KEYS[1]) - 2
if found[2] == false then
  return {ARGV[2], left}
end
left = left - 1
if left > 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
  return {ARGV[2], left}
end
if tonumber(ARGV[3] or '0') > 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {ARGV[2], 0}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], '1')
return {ARGV[2], 0}
"#;

/// Renew a batch of leases.
///
/// KEYS: lock keys. ARGV: the batch id, then for each key its ttl ms and its owner.
/// Returns `{batch id, statuses}` with one status per key: 1 renewed, 0 gone, -1 owned by
/// someone else, -2 not a lock (the key was overwritten with another type). Renewal only ever
/// extends a key's expiry (never shortens one that another hold relies on), and one bad key
/// does not fail the others: each key is looked at with `pcall`.
pub const RENEW: &str = r#"
local out = {}
for i, key in ipairs(KEYS) do
  local owner = redis.pcall('HGET', key, 'o')
  if type(owner) == 'table' and owner.err then
    out[i] = -2
  elseif owner == ARGV[2 * i + 1] then
    local ttl = tonumber(ARGV[2 * i])
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
    out[i] = 1
  elseif owner == false then
    out[i] = 0
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
/// their command once, on the hot path of every acquire and release.
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
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        conn: &mut ConnectionManager,
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

static ACQUIRE_SCRIPT: Lua = Lua::new(ACQUIRE);
static RELEASE_SCRIPT: Lua = Lua::new(RELEASE);
static RENEW_SCRIPT: Lua = Lua::new(RENEW);

/// One typed call of a script: its command, the request id its reply echoes first, and the
/// decoding of the rest of the reply.
pub(crate) trait ScriptCall {
    /// The reply after the echoed id, as redis-rs reads it.
    type Raw: FromRedisValue;
    /// The decoded reply.
    type Reply;
    /// The script this calls.
    fn script(&self) -> &'static Lua;
    /// The `EVALSHA` command with KEYS and ARGV in place.
    fn command(&self) -> Cmd;
    /// The id the reply must echo (a reply that echoes another answers another request).
    fn request_id(&self) -> &str;
    /// The reply, or `None` if it is not one this script gives (a reply of the wrong shape).
    fn decode(&self, raw: Self::Raw) -> Option<Self::Reply>;
}

/// [`ACQUIRE`] for one hold.
pub(crate) struct AcquireCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) owner: &'a str,
    /// The hold field: also the request id.
    pub(crate) hold: &'a str,
    pub(crate) ttl: Duration,
    /// How long the fence floor is kept (at least the ttl).
    pub(crate) retention: Duration,
    /// This call chain holds the lock already: never create it afresh.
    pub(crate) reentry: bool,
}

/// What [`ACQUIRE`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken afresh (or a replay of a fresh take), with a new fencing token.
    Fresh { token: u64 },
    /// Re-entered a hold of the same owner; the token is the outer hold's.
    Reentered { token: u64 },
    /// Held by another owner; its remaining ttl in ms (-1: the key has no expiry).
    Busy { pttl: i64 },
    /// A re-entry found no lock: the outer hold is gone.
    ReentryGone,
}

impl ScriptCall for AcquireCall<'_> {
    type Raw = (i64, i64);
    type Reply = Acquired;

    fn script(&self) -> &'static Lua {
        &ACQUIRE_SCRIPT
    }

    fn command(&self) -> Cmd {
        let mut cmd = ACQUIRE_SCRIPT.evalsha();
        cmd.arg(2)
            .arg(&self.keys.lock)
            .arg(&self.keys.fence)
            .arg(self.owner)
            .arg(self.hold)
            .arg(millis_ceil(self.ttl))
            .arg(millis_ceil(self.retention.max(self.ttl)))
            .arg(if self.reentry { "1" } else { "0" });
        cmd
    }

    fn request_id(&self) -> &str {
        self.hold
    }

    fn decode(&self, (status, value): (i64, i64)) -> Option<Acquired> {
        let token = || u64::try_from(value).ok();
        Some(match status {
            0 => Acquired::Busy { pttl: value },
            1 => Acquired::Fresh { token: token()? },
            2 => Acquired::Reentered { token: token()? },
            3 => Acquired::ReentryGone,
            _ => return None,
        })
    }
}

/// [`RELEASE`] of one hold.
pub(crate) struct ReleaseCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) owner: &'a str,
    /// The hold field: also the request id.
    pub(crate) hold: &'a str,
    /// `min_hold` not reached yet: leave the lock to expire after this long (zero: delete it).
    pub(crate) keep: Duration,
}

/// What [`RELEASE`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// This hold is gone; the lock is free or still held by re-entrant holds of the same owner.
    Yes,
    /// The lock is held by another owner: nothing changed.
    OtherOwner,
    /// No lock: it expired (or a replayed release already freed it).
    Absent,
}

impl ScriptCall for ReleaseCall<'_> {
    type Raw = i64;
    type Reply = Released;

    fn script(&self) -> &'static Lua {
        &RELEASE_SCRIPT
    }

    fn command(&self) -> Cmd {
        let mut cmd = RELEASE_SCRIPT.evalsha();
        cmd.arg(2)
            .arg(&self.keys.lock)
            .arg(&self.keys.channel)
            .arg(self.owner)
            .arg(self.hold)
            .arg(millis_ceil(self.keep));
        cmd
    }

    fn request_id(&self) -> &str {
        self.hold
    }

    fn decode(&self, code: i64) -> Option<Released> {
        Some(match code {
            -2 => Released::Absent,
            -1 => Released::OtherOwner,
            left if left >= 0 => Released::Yes,
            _ => return None,
        })
    }
}

/// One lease in a [`RenewCall`].
#[derive(Debug, Clone)]
pub(crate) struct RenewItem {
    pub(crate) key: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) ttl: Duration,
}

/// [`RENEW`] of a batch of leases.
pub(crate) struct RenewCall<'a> {
    pub(crate) batch_id: &'a str,
    pub(crate) items: &'a [RenewItem],
}

/// What [`RENEW`] found for one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Still ours: the expiry was extended (never shortened).
    Yes,
    /// The key is gone (expired, evicted, deleted).
    Gone,
    /// Another owner holds it.
    OtherOwner,
    /// The key is no lock any more (overwritten with another type).
    NotALock,
}

impl ScriptCall for RenewCall<'_> {
    type Raw = Vec<i64>;
    type Reply = Vec<Renewed>;

    fn script(&self) -> &'static Lua {
        &RENEW_SCRIPT
    }

    fn command(&self) -> Cmd {
        let mut cmd = RENEW_SCRIPT.evalsha();
        cmd.arg(self.items.len());
        for item in self.items {
            cmd.arg(&*item.key);
        }
        cmd.arg(self.batch_id);
        for item in self.items {
            cmd.arg(millis_ceil(item.ttl)).arg(&*item.owner);
        }
        cmd
    }

    fn request_id(&self) -> &str {
        self.batch_id
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

/// Every script, for preloading at connect.
pub(crate) static ALL: [&Lua; 3] = [&ACQUIRE_SCRIPT, &RELEASE_SCRIPT, &RENEW_SCRIPT];
