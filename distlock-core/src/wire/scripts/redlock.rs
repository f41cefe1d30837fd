//! RedLock's scripts: the acquire that takes a free lock only in its waiters' order
//! (`ACQUIRE_QUEUED`, with the grace of those ahead, `TURN_GRACE`) and the fence floor that a
//! quorum's fenced acquire reads and raises (`FENCE_FLOOR`).

use std::time::Duration;

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

/// Fence floor of a RedLock quorum's fenced acquire (see `lock/quorum_token`): read it, and raise
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
