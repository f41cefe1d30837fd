//! A set of locks taken together, all or none (`ACQUIRE_ALL`).

/// Acquire several locks at once, all or none (`distlock::lock_all`; see the `scripts` docs,
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
/// Fenced, each lock's token comes from its own fence floor, raised as
/// [`ACQUIRE_FENCED`](super::ACQUIRE_FENCED) raises it (a replay reads the floor back); a fence
/// key that does not hold a number is put back as it was and the script fails before any lock
/// is set.
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
