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
//! * **A waiter's attempt** (`HandedAcquireCall`, `ACQUIRE_HANDED`; one server, Sentinel, a
//!   cluster: a plain lock's waiter once it subscribed): queues the caller in
//!   `prefix:{name}:queue` (a sorted set: lock value → ticket, the caller's start and grant
//!   window in one score, `handed_ticket`) while the lock is held, and takes a free lock only
//!   in the queue's order.
//! * **Re-entry check** (`RenewCall` with one lease): the outer hold is still ours, and its
//!   expiry reaches at least the inner hold's ttl.
//! * **Release** (`ReleaseCall`, `RELEASE`): compare, then let go: on one server, Sentinel and
//!   a cluster the lock is handed to the first waiter of its queue in place (set to that
//!   waiter's value for its grant window, which its new holder extends) and the message on the
//!   release channel names it; with nobody queued (and over RedLock) the lock is deleted and
//!   the message is `1`, a wake (`grant_prelude!`). A release may also queue the releasing
//!   client's next waiter for the lock, with that waiter's ticket (`NextWaiter`: a waiter that
//!   waits in the client, `client::cohort`), before it lets go, so that waiter sends no attempt
//!   of its own. Releases that arrive together go out as one
//!   `RELEASE_MANY` call (`ReleaseManyCall`), and acquires that arrive together share one
//!   pipeline and one `ECHO` (see `batch`). The queue is a key next to a `d2` lock that changes
//!   nothing in it: a client that does not know it still excludes correctly (it deletes and
//!   wakes, and its waiters retry), so the version tag stays `d2`.
//! * **Renewal** (`RenewCall`, `RENEW`): compare and extend, batched.
//!
//! ### Permits (`distlock::semaphore(name, n)`)
//!
//! A semaphore of `n` permits lies at the same key, `prefix:{name}`, as a sorted set: one
//! member per holder (its lock value, `d2:<owner>`) scored by its lease deadline in the
//! server's clock (ms, `TIME`), and the member `d2:permits` scored `-n` (the agreed count, and
//! the mark of a `d2` semaphore). Every script that touches it removes the holders whose
//! deadline passed first (no sweeper: the set never holds more than `n` live holders plus
//! those expired since the last call), and sets the key's own expiry to the latest deadline
//! (so a semaphore nobody holds is gone); the last holder's release deletes it.
//!
//! * **Acquire** (`PermitAcquireCall`, `ACQUIRE_PERMIT`): a permit if fewer than `n` live
//!   holders; a replay of our own take after a lost reply finds our member and extends it;
//!   another `n` while holders live is refused (`Error::PermitsMismatch`), never a resize.
//!   Fenced, the token comes from the same fence floor as a lock's (a replay gets a fresh one,
//!   still above every earlier token).
//! * **Renewal, release**: `RENEW`, `RELEASE` and `RELEASE_MANY` take a permit's key in the
//!   same place as a lock's (a key that is not a string is looked at as a semaphore:
//!   `permit_prelude!`), so the watchdog's batches, the re-entry check, the group commit and the
//!   Sentinel confirmations serve both kinds unchanged. A release publishes on `:released`.
//!
//! ### Shared holds (`distlock::lock(name).read()`)
//!
//! Readers lie at the lock key too, as a sorted set like a semaphore's (one member per reader
//! scored by its lease deadline, expired readers removed by every script that touches it, the
//! key's expiry kept at the latest deadline), marked by the member `d2:readers` scored `-1`
//! instead of a count. Next to it, `prefix:{name}:writer` holds the value of a writer waiting
//! for the readers (its intent), with a short expiry (`WRITER_INTENT`, 1 s) that the writer renews
//! at each attempt.
//!
//! * **Read acquire** (`ReadAcquireCall`, `ACQUIRE_READ`): a share if no writer holds the lock
//!   (a `d2` string) and no writer's intent lives; a replay finds our member and extends it.
//!   Fenced, the token comes from the lock's fence floor.
//! * **Write acquire**: a lock's plain or fenced acquire; one that meets readers (`WRONGTYPE`,
//!   or the fenced script's "not a string") is sent again as `ACQUIRE_WRITE`
//!   (`WriteAcquireCall`), and so is every later attempt of that acquire: busy while readers
//!   live, a waiting writer marks its intent (so no new reader enters: writers do not starve)
//!   and takes the lock when the last reader left, removing its intent.
//! * **Renewal, release**: `RENEW`, `RELEASE` and `RELEASE_MANY`, as for a permit (a key that
//!   is not a string is a set of holders, `permit_prelude!`); a reader's release publishes.
//!
//! A semaphore and a set of readers of one name are incompatible with each other, as is a
//! distlock of an earlier protocol (its `SET ... GET` meets `WRONGTYPE`).
//!
//! The kinds exclude each other: a lock's `SET ... GET` on a semaphore's key is `WRONGTYPE`,
//! and a semaphore's acquire on a lock's key finds a string; both report it as incompatible,
//! as does a distlock of an earlier protocol.
//!
//! ### Sets of locks (`distlock::lock_all([a, b])`)
//!
//! A set taken together is nothing new in Redis: each of its locks is an ordinary `d2` lock (one
//! string key per name, `d2:<owner>`), all with the set's one value and the same expiry, so every
//! client of this protocol (and the CLI) sees each of them as the lock it is. Nothing is added to
//! the stored layout: the version tag stays `d2`.
//!
//! * **Acquire** (`SetAcquireCall`, `ACQUIRE_ALL`): every key checked, then all set, or none
//!   (busy at the first lock held by another owner or by readers; incompatible at the first
//!   key that is neither). On one server, Sentinel and each RedLock master the whole set is one
//!   call; in a cluster one call per hash slot, in a fixed order (see `lock::multi`).
//! * **Renewal**: `RENEW`, one item per lock (the watchdog's batches, the re-entry check).
//! * **Release** (`SetReleaseCall`): `RELEASE_MANY` over the set's locks (per hash slot in a
//!   cluster), each compared and deleted on its own, and published.
//!
//! A lock that asks for replica acknowledgement (`min_replicas`) gets `WAIT n timeout` after its
//! acquire or renewal in the same pipeline, so it runs on the connection (and, in a cluster, the
//! node) that wrote.
//!
//! Every reply answers with the request's id, so a reply that answers another request (a reply
//! lost on a connection that stayed open) is recognised. A key that holds anything else than a
//! `d2` lock (a lock of another distlock version, another program's key) is never misread: the
//! calls report it as incompatible.

use std::time::Duration;

/// The protocol version every lock value starts with.
pub const VERSION_TAG: &str = "d2:";

/// The member of a semaphore's sorted set that holds its permit count (as the score `-n`).
pub const PERMITS_MEMBER: &str = "d2:permits";

/// The Lua functions on a semaphore's or readers' sorted set shared by [`ACQUIRE_PERMIT`],
/// [`ACQUIRE_READ`], [`RENEW`], [`RELEASE`] and [`RELEASE_MANY`] (a macro, so that `concat!` makes each script one constant
/// string). Deadlines are the server's clock in ms; the count member's score is `-n`, below
/// every deadline. The lock scripts define them inside their branch for a key that is not a
/// string, so a lock's renewal and release never pay for making them.
macro_rules! permit_prelude {
    () => {
        r#"
local function permit_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function permit_count(key)
  if redis.call('TYPE', key)['ok'] ~= 'zset' then
    return nil
  end
  local n = redis.call('ZSCORE', key, 'd2:permits')
  if not n then
    return nil
  end
  return -tonumber(n)
end
local function permit_settle(key, now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local at = tonumber(last[2] or '0')
  if at <= now then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, string.format('%d', at - now))
  end
end
local function permit_set(key)
  if redis.call('TYPE', key)['ok'] ~= 'zset' then
    return false
  end
  return redis.call('ZSCORE', key, 'd2:permits') or redis.call('ZSCORE', key, 'd2:readers')
end
local function permit_renew(key, value, ttl)
  if not permit_set(key) then
    return -2
  end
  local now = permit_now()
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local s = redis.call('ZSCORE', key, value)
  if s then
    redis.call('ZADD', key, 'GT', string.format('%d', now + tonumber(ttl)), value)
  end
  permit_settle(key, now)
  if s then
    return 1
  end
  return 0
end
local function permit_release(key, value, keep)
  if not permit_set(key) then
    return -3
  end
  local now = permit_now()
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local code = -2
  if redis.call('ZSCORE', key, value) then
    if tonumber(keep) > 0 then
      redis.call('ZADD', key, 'XX', string.format('%d', now + tonumber(keep)), value)
      code = 1
    else
      redis.call('ZREM', key, value)
      code = 0
    end
  end
  permit_settle(key, now)
  return code
end
"#
    };
}

/// How a lock is let go, shared by [`RELEASE`], [`RELEASE_MANY`], [`LEAVE_QUEUE`] and
/// [`ACQUIRE_HANDED`] (a macro, so that `concat!` makes each script one constant string).
///
/// `let_go`: with the lock's queue given (one server, Sentinel, a cluster; not over RedLock),
/// the lock is handed in place to the first waiter queued for it: set to its value for its
/// grant window (read from its ticket, see `handed_ticket`; its new holder extends it to its
/// ttl), the entry removed, and the message names it; otherwise the lock is deleted and the
/// message is `1`, a plain wake. Without waiters this costs one `ZRANGE`. `wake`: the message
/// alone (a permit or a read hold let go: their waiters are woken, not handed anything).
///
/// `release_lock`: a `d2` lock's release (`v`: what the lock key holds, `false` if nothing),
/// as [`RELEASE`] returns its code. With a next waiter (`nv`, its ticket `nt`: a waiter of the
/// releasing client that waits in the client behind one already queued, see
/// `client::cohort`) the release queues it first (unless the lock is that waiter's already: it
/// took it by an attempt of its own), whatever else it finds, and keeps the
/// queue key for the lock's pttl and that waiter's window: a lock found free is then handed to
/// the first waiter at once, as [`ACQUIRE_HANDED`] would, and the waiter sends no attempt of
/// its own.
macro_rules! grant_prelude {
    () => {
        r#"
local function wake(chan, msg, sharded)
  if sharded then
    redis.call('SPUBLISH', chan, msg)
  else
    redis.call('PUBLISH', chan, msg)
  end
end
local function hand_over(lock, chan, q, first, sharded)
  redis.call('ZREM', q, first[1])
  local window = math.max(tonumber(first[2]) % 1024, 1)
  redis.call('SET', lock, first[1], 'PX', string.format('%d', window))
  wake(chan, first[1], sharded)
  return window
end
local function let_go(lock, chan, q, sharded)
  if q then
    local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    if first[1] then
      hand_over(lock, chan, q, first, sharded)
      return
    end
  end
  redis.call('DEL', lock)
  wake(chan, '1', sharded)
end
local function release_lock(lock, chan, q, v, value, keep, nv, nt, sharded)
  if v and v ~= value and string.sub(v, 1, 3) ~= 'd2:' then
    return -3
  end
  if nv and v ~= nv then
    redis.call('ZADD', q, nt, nv)
  end
  local code = 0
  if v == false then
    code = -2
  elseif v ~= value then
    code = -1
  elseif tonumber(keep) > 0 then
    redis.call('PEXPIRE', lock, keep)
  end
  if (code == 0 and tonumber(keep) <= 0) or (code == -2 and nv) then
    let_go(lock, chan, q, sharded)
  end
  if nv then
    local left = math.max(redis.call('PTTL', lock), 0) + math.max(tonumber(nt) % 1024, 1)
    if redis.call('PTTL', q) < left then
      redis.call('PEXPIRE', q, left)
    end
  end
  return code
end
"#
    };
}

/// The fence raise shared by [`ACQUIRE_PERMIT`] and [`ACQUIRE_READ`] (a macro, so that
/// `concat!` makes each script one constant string): with a retention above 0, the token is
/// the server's time in µs, or one above the fence key's last token if that is not below it,
/// and the key keeps it for the retention; a key that does not hold a number is left as it was
/// and reported (`bad`). A retention of 0: no token (0).
macro_rules! fence_prelude {
    () => {
        r#"
local function fence_raise(key, retention)
  if tonumber(retention) <= 0 then
    return 0, false
  end
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local prev = redis.call('SET', key, string.format('%d', token), 'PX', retention, 'GET')
  local last = tonumber(prev or '0')
  if last == nil then
    redis.call('SET', key, prev, 'PX', retention)
    return 0, true
  end
  if token <= last then
    token = last + 1
    redis.call('SET', key, string.format('%d', token), 'PX', retention)
  end
  return token, false
end
"#
    };
}

/// Acquire a permit of a semaphore (see the module docs, "Permits").
///
/// KEYS: semaphore, fence. ARGV: value (`d2:<owner>`), ttl ms, permits `n`, fence retention ms
/// (0: no fencing token), request id. Returns `{id, {1, token}}` (taken, or a replay of our own
/// take, extended to the ttl; token 0 when not fenced), `{id, {0, ms}}` (all `n` permits held:
/// the first lease ends in ms), `{id, {3, m}}` (live holders agreed on `m` permits, not `n`:
/// nothing changed) or `{id, {2, 0}}` (the key holds something that is not a `d2` semaphore:
/// a lock, another version's or another program's key).
///
/// The count member is written again with each take, so a semaphore whose holders all expired
/// or left takes the `n` of its next holder.
pub const ACQUIRE_PERMIT: &str = concat!(
    permit_prelude!(),
    fence_prelude!(),
    r#"
local now = permit_now()
local want = tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local n = permit_count(KEYS[1])
  if not n then
    return {ARGV[5], {2, 0}}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
  local held = redis.call('ZCARD', KEYS[1]) - 1
  if held > 0 and n ~= want then
    return {ARGV[5], {3, n}}
  end
  if held >= want and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    local first = redis.call('ZRANGE', KEYS[1], 1, 1, 'WITHSCORES')
    return {ARGV[5], {0, math.max(tonumber(first[2]) - now, 1)}}
  end
end
local token, bad = fence_raise(KEYS[2], ARGV[4])
if bad then
  return redis.error_reply('ERR distlock: the fence key ' .. KEYS[2] .. ' does not hold a number; delete it to use this semaphore')
end
redis.call('ZADD', KEYS[1], string.format('%d', -want), 'd2:permits')
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
permit_settle(KEYS[1], now)
return {ARGV[5], {1, token}}
"#
);

/// How long a waiting writer's intent (`prefix:{name}:writer`, see the module docs, "Shared
/// holds") stops new readers unless the writer renews it: a writer renews it at each attempt
/// and attempts at least every third of it, so this bounds what a writer that went away costs
/// the readers.
pub(crate) const WRITER_INTENT: Duration = Duration::from_millis(1000);

/// Acquire a shared (read) hold (see the module docs, "Shared holds").
///
/// KEYS: lock, fence, writer intent. ARGV: value (`d2:<owner>`), ttl ms, fence retention ms
/// (0: no fencing token), request id. Returns `{id, {1, token}}` (a share taken, or a replay of
/// our own take, extended to the ttl; token 0 when not fenced), `{id, {0, ms}}` (a writer holds
/// the lock, for ms, or waits for it: its intent lasts ms more), or `{id, {2, 0}}` (the key
/// holds something that is neither a `d2` lock nor a `d2` set of readers: a semaphore, another
/// version's or another program's key).
pub const ACQUIRE_READ: &str = concat!(
    permit_prelude!(),
    fence_prelude!(),
    r#"
local now = permit_now()
local kind = redis.call('TYPE', KEYS[1])['ok']
local replay = false
if kind == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.sub(v, 1, 3) ~= 'd2:' then
    return {ARGV[4], {2, 0}}
  end
  return {ARGV[4], {0, redis.call('PTTL', KEYS[1])}}
elseif kind == 'zset' then
  if not redis.call('ZSCORE', KEYS[1], 'd2:readers') then
    return {ARGV[4], {2, 0}}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
  replay = redis.call('ZSCORE', KEYS[1], ARGV[1]) ~= false
elseif kind ~= 'none' then
  return {ARGV[4], {2, 0}}
end
if not replay then
  local intent = redis.call('PTTL', KEYS[3])
  if intent ~= -2 then
    if kind == 'zset' then
      permit_settle(KEYS[1], now)
    end
    if intent < 0 then
      intent = 1000
    end
    return {ARGV[4], {0, intent}}
  end
end
local token, bad = fence_raise(KEYS[2], ARGV[3])
if bad then
  return redis.error_reply('ERR distlock: the fence key ' .. KEYS[2] .. ' does not hold a number; delete it to use this lock')
end
redis.call('ZADD', KEYS[1], '-1', 'd2:readers')
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
permit_settle(KEYS[1], now)
return {ARGV[4], {1, token}}
"#
);

/// Acquire the lock (exclusive, plain or fenced) where readers may hold it: a writer whose
/// plain acquire met a set of readers, and every later attempt of that acquire (see the module
/// docs, "Shared holds").
///
/// KEYS: lock, fence, writer intent. ARGV: value (`d2:<owner>`), ttl ms, fence retention ms (0:
/// no fencing token), request id, intent ms (0: the caller does not wait, and marks no intent).
/// Returns `{id, {1, token}}` (taken, or a replay of our own take; token 0 when not fenced),
/// `{id, {0, ms}}` (readers or another writer hold it: try again within ms) or `{id, {2, 0}}`
/// (not a `d2` lock or set of readers).
///
/// Busy, a waiting writer (intent ms > 0) sets the intent to its own value for intent ms (new
/// readers wait while it lasts) and is told to try again within a third of it, so it renews
/// the intent while it waits; taking the lock removes the intent if it is still its own.
pub const ACQUIRE_WRITE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mark = tonumber(ARGV[5])
local function busy(ms)
  if mark > 0 then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', mark)
    ms = math.min(ms, math.max(math.floor(mark / 3), 1))
  end
  return {ARGV[4], {0, ms}}
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'zset' then
  if not redis.call('ZSCORE', KEYS[1], 'd2:readers') then
    return {ARGV[4], {2, 0}}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
  local first = redis.call('ZRANGE', KEYS[1], 1, 1, 'WITHSCORES')
  if first[2] then
    local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(last[2]) - now))
    return busy(math.max(tonumber(first[2]) - now, 1))
  end
  redis.call('DEL', KEYS[1])
elseif kind == 'string' then
  local v = redis.call('GET', KEYS[1])
  if v == ARGV[1] then
    local token = 0
    if tonumber(ARGV[3]) > 0 then
      token = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
    end
    return {ARGV[4], {1, token}}
  end
  if string.sub(v, 1, 3) ~= 'd2:' then
    return {ARGV[4], {2, 0}}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    pttl = 1000
  end
  return busy(pttl)
elseif kind ~= 'none' then
  return {ARGV[4], {2, 0}}
end
local token = 0
if tonumber(ARGV[3]) > 0 then
  token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local prev = redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3], 'GET')
  local last = tonumber(prev or '0')
  if last == nil then
    redis.call('SET', KEYS[2], prev, 'PX', ARGV[3])
    return redis.error_reply('ERR distlock: the fence key ' .. KEYS[2] .. ' does not hold a number; delete it to use this lock')
  end
  if token <= last then
    token = last + 1
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
return {ARGV[4], {1, token}}
"#;

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

/// Acquire several locks at once, all or none (`distlock::lock_all`; see the module docs,
/// "Sets of locks"): every key is checked first, and only if all are free (or ours: a replay)
/// are all of them set, to the same value and expiry.
///
/// KEYS: lock and fence of each lock, in pairs (one hash slot per call in a cluster). ARGV:
/// value (`d2:<owner>`), ttl ms, fence retention ms (0: no fencing tokens), request id.
/// Returns `{id, {1, token...}}` (all taken, or a replay of our own take; one token per lock,
/// in KEYS order, 0 when not fenced), `{id, {0, pttl, i}}` (lock `i`, counted from 1, is held
/// by another `d2` owner or by readers, for pttl ms; nothing changed) or `{id, {2, 0, i}}`
/// (lock `i` holds something that is not a `d2` lock or a set of readers: a semaphore, another
/// version's or another program's key; nothing changed).
///
/// Fenced, each lock's token comes from its own fence floor, raised as [`ACQUIRE_FENCED`]
/// raises it (a replay reads the floor back); a fence key that does not hold a number is put
/// back as it was and the script fails before any lock is set.
pub const ACQUIRE_ALL: &str = r#"
local n = #KEYS / 2
for i = 1, n do
  local key = KEYS[2 * i - 1]
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    if redis.call('TYPE', key)['ok'] == 'zset' and redis.call('ZSCORE', key, 'd2:readers') then
      return {ARGV[4], {0, redis.call('PTTL', key), i}}
    end
    return {ARGV[4], {2, 0, i}}
  end
  if v ~= false and v ~= ARGV[1] then
    if string.sub(v, 1, 3) ~= 'd2:' then
      return {ARGV[4], {2, 0, i}}
    end
    return {ARGV[4], {0, redis.call('PTTL', key), i}}
  end
end
local out = {1}
local retention = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, n do
  local token = 0
  if retention > 0 then
    local fence = KEYS[2 * i]
    if redis.call('GET', KEYS[2 * i - 1]) == ARGV[1] then
      token = tonumber(redis.call('GET', fence) or '0') or 0
    else
      token = now
      local prev = redis.call('SET', fence, string.format('%d', token), 'PX', ARGV[3], 'GET')
      local last = tonumber(prev or '0')
      if last == nil then
        redis.call('SET', fence, prev, 'PX', ARGV[3])
        return redis.error_reply('ERR distlock: the fence key ' .. fence .. ' does not hold a number; delete it to use this lock')
      end
      if token <= last then
        token = last + 1
        redis.call('SET', fence, string.format('%d', token), 'PX', ARGV[3])
      end
    end
  end
  out[i + 1] = token
end
for i = 1, n do
  redis.call('SET', KEYS[2 * i - 1], ARGV[1], 'PX', ARGV[2])
end
return {ARGV[4], out}
"#;

/// Fence floor of a RedLock quorum's fenced acquire (see `lock/fence`): read it, and raise
/// it to at least a given token.
///
/// KEYS: fence. ARGV: request id, token to raise the floor to (0: read only), retention ms.
/// Returns `{id, floor}`, the floor before the raise: below the token, this call raised it
/// (and no other raise to the same token can have, before or after it).
pub const FENCE_FLOOR: &str = r#"
local f = tonumber(redis.call('GET', KEYS[1]) or '0')
if f == nil then
  return redis.error_reply('ERR distlock: the fence key ' .. KEYS[1] .. ' does not hold a number; delete it to use this lock')
end
local to = tonumber(ARGV[2])
if to > f then
  redis.call('SET', KEYS[1], string.format('%d', to), 'PX', ARGV[3])
end
return {ARGV[1], f}
"#;

/// How long the waiters ahead of a RedLock caller that found the lock free still have to take
/// their turn (see [`ACQUIRE_QUEUED`]): a live waiter is woken by the release within
/// milliseconds (or looks again every 250 ms when its subscription reached too few masters),
/// so this is what a waiter that went away can cost the lock after a release, at most.
pub(crate) const TURN_GRACE: Duration = Duration::from_millis(300);

/// The longest a lock handed to a queued waiter by a release (one server, Sentinel, a cluster:
/// see [`RELEASE`]) is granted for before its new holder extends it: a waiter that went away
/// can cost the lock this long at most (or its ttl, if shorter: `grant_window`), never its
/// ttl (see [`ACQUIRE_HANDED`]).
pub(crate) const GRANT_WINDOW: Duration = Duration::from_secs(1);

/// The grant window of a lock of `ttl`: `GRANT_WINDOW`, or the ttl if that is shorter.
pub(crate) fn grant_window(ttl: Duration) -> Duration {
    ttl.min(GRANT_WINDOW)
}

/// The ticket of a waiter to whom a release may hand the lock: when its acquire started, in ms
/// since the Unix epoch, times 1024, plus its grant window in ms (at most 1000): the queue's
/// order is still the waiters' arrival, and the release that hands the lock over reads the
/// window from the entry's own score, at no extra cost (exact in a score: below 2^53 for
/// another 270 years).
pub(crate) fn handed_ticket(started_ms: u64, window: Duration) -> u64 {
    let window = u64::try_from(window.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, 1000);
    started_ms.saturating_mul(1024).saturating_add(window)
}

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

/// A waiter whose acquire ended (without the lock, or over RedLock with it too: see
/// `lock::queue::QueueEntry`) takes its entry out of the queue (see [`ACQUIRE_QUEUED`],
/// [`ACQUIRE_HANDED`]), so the waiters behind it need not wait out its grace or its grant.
/// Given the lock and its release channel too (one server, Sentinel, a cluster, where a release
/// may have handed it the lock: a waiter leaving without it), a lock holding its value is let
/// go: handed on to the next waiter, or deleted (`grant_prelude!`).
///
/// KEYS: queue, queue until, and the lock and its release channel. ARGV: value (`d2:<owner>`),
/// request id, and `s` for a sharded release channel. Returns `{id, removed}`.
pub const LEAVE_QUEUE: &str = concat!(
    grant_prelude!(),
    r#"
redis.call('ZREM', KEYS[2], ARGV[1])
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if KEYS[3] and redis.pcall('GET', KEYS[3]) == ARGV[1] then
  let_go(KEYS[3], KEYS[4], KEYS[1], ARGV[3] == 's')
end
return {ARGV[2], removed}
"#
);

/// A plain lock's waiting attempt on one server, Sentinel or a cluster, where the lock is
/// handed to the first waiter of its queue when it is let go (`grant_prelude!`): the queue is
/// `:queue`, lock value → ticket (see `handed_ticket`: the waiters' order, and each one's
/// grant window).
///
/// KEYS: lock, queue, release channel. ARGV: value (`d2:<owner>`), ttl ms, request id, ticket,
/// grant window ms, `s` for a sharded release channel. Returns `{id, {1, 0}}` (ours: taken, or
/// handed to us, or a replay after a lost reply; its expiry raised to the ttl, so the lease
/// counts from this attempt), `{id, {0, pttl}}` (held by another `d2` owner: the caller is
/// queued, and tries again at the latest at the pttl) or `{id, {2, 0}}` (not a `d2` lock).
///
/// A free lock is taken only by the first waiter: a lock found free with an earlier waiter
/// queued is handed to that one now (as a release would have: a holder that expired, or a
/// waiter that went away after it was handed the lock, let it go without a release) and the
/// caller queues behind it. The queue key lasts as long as the latest holder's pttl plus a
/// window after each attempt: a waiter that went away without leaving costs the lock one
/// grant window when its turn comes, never its ttl. The queue only ever refuses a take:
/// exclusion rests on the lock key alone.
pub const ACQUIRE_HANDED: &str = concat!(
    grant_prelude!(),
    r#"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {ARGV[3], {2, 0}}
end
if v == ARGV[1] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {ARGV[3], {1, 0}}
end
if v and string.sub(v, 1, 3) ~= 'd2:' then
  return {ARGV[3], {2, 0}}
end
local function queue(ms)
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  local keep = ms + tonumber(ARGV[5])
  if redis.call('PTTL', KEYS[2]) < keep then
    redis.call('PEXPIRE', KEYS[2], keep)
  end
end
if v then
  local pttl = redis.call('PTTL', KEYS[1])
  queue(math.max(pttl, 0))
  return {ARGV[3], {0, pttl}}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] and first[1] ~= ARGV[1] and tonumber(first[2]) < tonumber(ARGV[4]) then
  local window = hand_over(KEYS[1], KEYS[3], KEYS[2], first, ARGV[6] == 's')
  queue(window)
  return {ARGV[3], {0, window}}
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[3], {1, 0}}
"#
);

/// Release.
///
/// KEYS: lock, release channel, and (one server, Sentinel, a cluster: where a lock let go is
/// handed to its first waiter) the lock's queue. ARGV: value (`d2:<owner>`), request id, keep
/// ms, `s` for a sharded release channel (a cluster: `SPUBLISH` reaches the subscribers of
/// the lock's own shard, where `PUBLISH` would be broadcast to every node), and optionally the
/// value and ticket of the releasing client's next waiter for the lock (see `release_lock` in
/// `grant_prelude!`: queued by this release, so it sends no attempt of its own).
/// Returns `{id, code}`: 0 released, -1 another owner holds it (nothing changed), -2 no lock (it
/// expired, or a replayed release already freed it), -3 the key is not a `d2` lock. With keep
/// ms > 0 (`min_hold` not reached yet) the lock is left to expire after keep ms instead of
/// being let go now; otherwise it is handed to the first waiter queued for it, or deleted and
/// waiters woken (`grant_prelude!`). A semaphore's key (a key that is not a string) releases
/// the permit of that value the same way (`permit_prelude!`; its waiters are woken).
pub const RELEASE: &str = concat!(
    grant_prelude!(),
    r#"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then"#,
    permit_prelude!(),
    r#"
  local code = permit_release(KEYS[1], ARGV[1], ARGV[3])
  if code == 0 then
    wake(KEYS[2], '1', ARGV[4] == 's')
  end
  return {ARGV[2], math.min(code, 0)}
end
return {ARGV[2], release_lock(KEYS[1], KEYS[2], KEYS[3], v, ARGV[1], ARGV[3], ARGV[5], ARGV[6], ARGV[4] == 's')}
"#
);

/// Release several locks in one call (a batch of releases that arrived together, see `batch`;
/// a set of locks held together).
///
/// KEYS: per lock, its lock key and release channel, and with handoff (the third ARGV `3`) its queue
/// (see [`RELEASE`]). ARGV: the request id, `s` for sharded release channels (else `-`), the
/// keys per lock (`2` or `3`), then for each lock its value (`d2:<owner>`) and keep ms, and
/// with handoff (3 keys per lock) the value of the next waiter to queue (empty: none) and its
/// ticket (see [`RELEASE`]).
/// Returns `{id, codes}` with one code per lock, as [`RELEASE`] returns it (a permit's too).
pub const RELEASE_MANY: &str = concat!(
    grant_prelude!(),
    r#"
local out = {}
local per = tonumber(ARGV[3])
local stride = per == 3 and 4 or 2
local sharded = ARGV[2] == 's'
for i = 1, #KEYS / per do
  local lock = KEYS[per * (i - 1) + 1]
  local chan = KEYS[per * (i - 1) + 2]
  local at = 3 + stride * (i - 1)
  local value = ARGV[at + 1]
  local keep = ARGV[at + 2]
  local v = redis.pcall('GET', lock)
  if type(v) == 'table' then"#,
    permit_prelude!(),
    r#"
    out[i] = permit_release(lock, value, keep)
    if out[i] == 0 then
      wake(chan, '1', sharded)
    end
    out[i] = math.min(out[i], 0)
  elseif per == 3 then
    local nv = ARGV[at + 3]
    if nv == '' then
      nv = nil
    end
    out[i] = release_lock(lock, chan, KEYS[per * (i - 1) + 3], v, value, keep, nv, ARGV[at + 4], sharded)
  else
    out[i] = release_lock(lock, chan, nil, v, value, keep, nil, nil, sharded)
  end
end
return {ARGV[1], out}
"#
);

/// Renew a batch of leases (and check a re-entry: a batch of one).
///
/// KEYS: lock keys. ARGV: the request id, then for each key its ttl ms and its value.
/// Returns `{id, statuses}` with one status per key: 1 ours (its expiry now reaches at least the
/// ttl), 0 gone, -1 another owner's, -2 not a `d2` lock. Renewal only ever extends a key's
/// expiry (never shortens one that another hold relies on), and one bad key does not fail the
/// others: each key is read with `pcall`. A semaphore's key (not a string) renews the permit
/// of that value the same way (only extends; 0 when the permit's lease ended), see
/// `permit_prelude!`.
pub const RENEW: &str = concat!(
    r#"
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then"#,
    permit_prelude!(),
    r#"
    out[i] = permit_renew(key, ARGV[2 * i + 1], ARGV[2 * i])
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
"#
);
