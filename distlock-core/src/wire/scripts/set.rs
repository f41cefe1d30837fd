//! A set of locks taken together, all or none (`ACQUIRE_ALL`), in its turn where a release
//! hands a lock over.

/// Acquire several locks at once, all or none (`distlock::lock_all`; see the `scripts` docs,
/// "Sets of locks"): every key is checked first, and only if all are free (or ours: a replay,
/// or a lock handed to us) are all of them set, to the same value and expiry.
///
/// KEYS: per lock, its lock key and fence, and for a waiter in its turn (one server, Sentinel,
/// a cluster whose set lies in one hash slot) its waiters' queue, release channel and
/// waiters' request ids (`queue:ids`): 2 or 5 keys per lock (one hash slot per call in a
/// cluster). ARGV: value (`d2:<owner>`), ttl ms, fence retention ms (0: no fencing tokens),
/// request id, and for a waiter in its turn its ticket (`handed_ticket`) and `s` for sharded
/// release channels. Returns `{id, {1, token...}}` (all taken, or a replay of our own take; one
/// token per lock, in KEYS order, 0 when not fenced), `{id, {0, pttl, i}}` (lock `i`, counted
/// from 1, is held by another `d2` owner or by readers, for pttl ms; nothing taken) or
/// `{id, {2, 0, i}}` (lock `i` holds something that is not a `d2` lock or a set of readers: a
/// semaphore, another version's or another program's key; nothing changed).
///
/// Fenced, each lock's token comes from its own fence floor, raised as
/// [`ACQUIRE_FENCED`](super::ACQUIRE_FENCED) raises it (a replay, every lock already ours,
/// reads the floors back: a waiter is handed one lock at most, never a whole set of two or
/// more); a fence key that does not hold a number is put back as it was and the script fails
/// before any lock is set.
///
/// **A waiter in its turn** waits in the queue of one lock at a time, the first it finds
/// held: a busy attempt queues it there (its ticket and request id, as a lock's waiter,
/// [`ACQUIRE_HANDED`](super::ACQUIRE_HANDED)), takes it out of its other locks' queues, and lets
/// go every lock of the set a release handed to it meanwhile (handed on to that lock's next
/// waiter, `let_go`): a set never waits holding a part of itself. A lock found free with
/// earlier waiters queued for it is turned over to them (`turn_over`), and the caller queues
/// behind them. A
/// release of the lock it waits at hands that lock to it (`grant_prelude!`), and its next
/// attempt, at once, finds that lock its own and takes the whole set if the others are free.
pub const ACQUIRE_ALL: &str = concat!(
    holders_prelude!(),
    marks_prelude!(),
    grant_prelude!(),
    fence_prelude!(),
    r#"
local turn = ARGV[5] ~= nil
local per = turn and 5 or 2
local n = #KEYS / per
local sharded = ARGV[6] == 's'
local function key(i, j)
  return KEYS[per * (i - 1) + j]
end
local function busy(i, ms, raw)
  if raw then
    mark(key(i, 1), raw)
  end
  if turn then
    for j = 1, n do
      local q, ids = key(j, 3), key(j, 5)
      if j == i then
        enqueue(q, ids, ARGV[1], ARGV[5], ARGV[4], ms, ARGV[7])
      else
        redis.call('ZREM', q, ARGV[1])
        redis.call('HDEL', ids, ARGV[1])
        if unmark(redis.pcall('GET', key(j, 1))) == ARGV[1] then
          let_go(key(j, 1), key(j, 4), q, ids, sharded)
        end
      end
    end
  end
  return {ARGV[4], {0, ms, i}}
end
local mine, marked = 0, {}
for i = 1, n do
  local lock = key(i, 1)
  local raw = redis.pcall('GET', lock)
  local v = unmark(raw)
  if v == ARGV[1] then
    mine = mine + 1
    marked[i] = raw ~= v
  end
  if type(v) == 'table' then
    if redis.call('TYPE', lock)['ok'] == 'zset' and redis.call('ZSCORE', lock, 'd2:readers') then
      return busy(i, redis.call('PTTL', lock))
    end
    return {ARGV[4], {2, 0, i}}
  end
  if v ~= false and v ~= ARGV[1] then
    if string.sub(v, 1, 3) ~= 'd2:' then
      return {ARGV[4], {2, 0, i}}
    end
    return busy(i, redis.call('PTTL', lock), raw)
  end
  if turn and v == false then
    if turn_over(lock, key(i, 4), key(i, 3), key(i, 5), nil, tonumber(ARGV[5]), sharded, nil) then
      return busy(i, math.max(redis.call('PTTL', lock), 1))
    end
  end
end
local replay = mine == n and (n > 1 or not turn)
local out = {1}
for i = 1, n do
  local token, bad = 0, false
  if replay and tonumber(ARGV[3]) > 0 then
    token = tonumber(redis.call('GET', key(i, 2)) or '0') or 0
  elseif not replay then
    token, bad = fence_raise(key(i, 2), ARGV[3])
  end
  if bad then
    return fence_error(key(i, 2), 'lock')
  end
  out[i + 1] = token
end
for i = 1, n do
  local value = ARGV[1]
  if turn then
    redis.call('ZREM', key(i, 3), ARGV[1])
    redis.call('HDEL', key(i, 5), ARGV[1])
    if marked[i] or redis.call('ZCARD', key(i, 3)) > 0 then
      value = value .. '+'
    end
  elseif marked[i] then
    value = value .. '+'
  end
  redis.call('SET', key(i, 1), value, 'PX', ARGV[2])
end
return {ARGV[4], out}
"#
);
