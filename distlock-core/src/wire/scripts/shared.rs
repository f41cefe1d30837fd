//! The holds that several holders share at one key: a semaphore's permit (`ACQUIRE_PERMIT`), a
//! read hold (`ACQUIRE_READ`), and the lock taken where readers may hold it (`ACQUIRE_WRITE`,
//! with the writer's intent, `WRITER_INTENT`).

use std::time::Duration;

/// Acquire a permit of a semaphore (see the `scripts` docs, "Permits").
///
/// KEYS: semaphore, fence, and for a waiter in its turn (one server, Sentinel, a cluster) the
/// waiters' queue, the release channel and the waiters' request ids (`queue:ids`). ARGV: value
/// (`d2:<owner>`), ttl ms, permits `n`, fence retention ms (0: no fencing token), request id,
/// and for a waiter in its turn its ticket (`handed_ticket`, which carries its grant window)
/// and `s` for a sharded release channel. Returns `{id, {1, token}}` (taken, or a replay of our
/// own take, or a permit handed to us, extended to the ttl; token 0 when not fenced),
/// `{id, {0, ms}}` (all `n` permits held: the first lease ends in ms), `{id, {3, m}}` (live
/// holders agreed on `m` permits, not `n`: nothing changed) or `{id, {2, 0}}` (the key holds
/// something that is not a `d2` semaphore: a lock, another version's or another program's
/// key).
///
/// The count member is written again with each take, so a semaphore whose holders all expired
/// or left takes the `n` of its next holder.
///
/// **A waiter in its turn** (the queue given) takes a free permit only after every waiter
/// queued ahead of it (a lower ticket) was handed one (`permit_hand`: permits freed without a
/// release, by a lease that ran out, reach the waiters in their order); busy, it queues itself
/// (its entry and its request id, kept as long as the semaphore plus its window) and a release
/// hands it the next permit freed (`permit_release`), for its grant window (the waiter trusts
/// that as a lock's waiter trusts a grant, `lock::wait_loop`). A confirming waiter's next
/// attempt (fenced, or asking for replicas; or a grant heard too late) finds the permit its
/// own: its lease extended to the ttl and, fenced, a fresh token raised while it is its own.
pub const ACQUIRE_PERMIT: &str = concat!(
    holders_prelude!(),
    marks_prelude!(),
    grant_prelude!(),
    permit_prelude!(),
    permit_handoff_prelude!(),
    fence_prelude!(),
    r#"
local now = permit_now()
local want = tonumber(ARGV[3])
local turn = KEYS[3] ~= nil
local held = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  local n = permit_count(KEYS[1])
  if not n then
    return {ARGV[5], {2, 0}}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
  held = redis.call('ZCARD', KEYS[1]) - 1
  if held > 0 and n ~= want then
    return {ARGV[5], {3, n}}
  end
  if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    held = -1
  end
end
local free = want - held
if held >= 0 and turn then
  free = permit_hand(KEYS[1], KEYS[4], KEYS[3], KEYS[5], now, want, tonumber(ARGV[6]), ARGV[7] == 's')
end
if held >= 0 and free <= 0 then
  local first = redis.call('ZRANGE', KEYS[1], 1, 1, 'WITHSCORES')
  local ms = math.max(tonumber(first[2]) - now, 1)
  if turn then
    permit_settle(KEYS[1], now)
    enqueue(KEYS[3], KEYS[5], ARGV[1], ARGV[6], ARGV[5], redis.call('PTTL', KEYS[1]), ARGV[8])
  end
  return {ARGV[5], {0, ms}}
end
local token, bad = fence_raise(KEYS[2], ARGV[4])
if bad then
  return fence_error(KEYS[2], 'semaphore')
end
if turn then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
end
redis.call('ZADD', KEYS[1], string.format('%d', -want), 'd2:permits')
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
permit_settle(KEYS[1], now)
return {ARGV[5], {1, token}}
"#
);

/// How long a waiting writer's intent (`prefix:{name}:writer`, see the `scripts` docs, "Shared
/// holds") stops new readers unless the writer renews it: a writer renews it at each attempt
/// and attempts at least every third of it, so this bounds what a writer that went away costs
/// the readers.
pub(crate) const WRITER_INTENT: Duration = Duration::from_millis(1000);

/// Acquire a shared (read) hold (see the `scripts` docs, "Shared holds").
///
/// KEYS: lock, fence, writer intent, and where a release hands the lock over (one server,
/// Sentinel, a cluster) the waiters' queue, the release channel, the waiters' request ids
/// (`queue:ids`) and when each writer waiting behind readers lapses (`queue:until`: a writer
/// at the head that went away is taken out, see `turn_over`). ARGV: value (`d2:<owner>`), ttl ms, fence retention ms (0: no fencing token),
/// request id, and with the queue the caller's ticket (`handed_ticket`; 0: it does not queue)
/// and `s` for a sharded release channel. Returns `{id, {1, token}}` (a share taken, or a
/// replay of our own take, or a share handed to us, extended to the ttl; token 0 when not
/// fenced), `{id, {0, ms}}` (a writer holds the lock, for ms, or waits for it: queued ahead
/// of the caller, or its intent lasts ms more), or `{id, {2, 0}}` (the key holds something
/// that is neither a `d2` lock nor a `d2` set of readers: a semaphore, another version's or
/// another program's key).
///
/// **With the queue** readers and writers take their turns in one line: a reader enters only
/// once the waiters queued ahead of it had theirs (`turn_over` hands them the lock now: the
/// readers ahead a share each, a writer ahead the lock if no reader holds it), so it never
/// passes a writer queued before it (and a writer queued behind readers is handed the lock by
/// the last reader's release). Busy, a reader with a ticket queues itself (its request id
/// recorded as `r:<id>`: a reader) and is handed a share by the release that turns the lock
/// over to it.
pub const ACQUIRE_READ: &str = concat!(
    holders_prelude!(),
    marks_prelude!(),
    grant_prelude!(),
    permit_prelude!(),
    fence_prelude!(),
    r#"
local now = permit_now()
local turn = KEYS[4] ~= nil
local ticket = tonumber(ARGV[5] or '0')
local function busy(ms)
  if ticket > 0 then
    enqueue(KEYS[4], KEYS[6], ARGV[1], ARGV[5], 'r:' .. ARGV[4], redis.call('PTTL', KEYS[1]), ARGV[7])
  end
  return {ARGV[4], {0, ms}}
end
local kind = redis.call('TYPE', KEYS[1])['ok']
local replay = false
if kind == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.sub(v, 1, 3) ~= 'd2:' then
    return {ARGV[4], {2, 0}}
  end
  if ticket > 0 then
    mark(KEYS[1], v)
  end
  return busy(redis.call('PTTL', KEYS[1]))
elseif kind == 'zset' then
  if not redis.call('ZSCORE', KEYS[1], 'd2:readers') then
    return {ARGV[4], {2, 0}}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
  replay = redis.call('ZSCORE', KEYS[1], ARGV[1]) ~= false
elseif kind ~= 'none' then
  return {ARGV[4], {2, 0}}
end
if not replay and turn then
  local held = kind == 'zset' and 'zset' or nil
  local below = ticket > 0 and ticket or nil
  local turned = turn_over(KEYS[1], KEYS[5], KEYS[4], KEYS[6], held, below, ARGV[6] == 's', KEYS[7])
  if turned == 'writer' or turned == 'handed' then
    return busy(math.max(redis.call('PTTL', KEYS[1]), 1))
  end
end
if not replay then
  local intent = redis.call('PTTL', KEYS[3])
  if intent ~= -2 then
    if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then
      permit_settle(KEYS[1], now)
    end
    if intent < 0 then
      intent = 1000
    end
    return busy(intent)
  end
end
local token, bad = fence_raise(KEYS[2], ARGV[3])
if bad then
  return fence_error(KEYS[2], 'lock')
end
if ticket > 0 then
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
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
pub const ACQUIRE_WRITE: &str = concat!(
    fence_prelude!(),
    marks_prelude!(),
    r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local intent = tonumber(ARGV[5])
local function busy(ms)
  if intent > 0 then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', intent)
    ms = math.min(ms, math.max(math.floor(intent / 3), 1))
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
  local raw = redis.call('GET', KEYS[1])
  local v = unmark(raw)
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
  if intent > 0 then
    mark(KEYS[1], raw)
  end
  return busy(pttl)
elseif kind ~= 'none' then
  return {ARGV[4], {2, 0}}
end
local token, bad = fence_raise(KEYS[2], ARGV[3])
if bad then
  return fence_error(KEYS[2], 'lock')
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
return {ARGV[4], {1, token}}
"#
);
