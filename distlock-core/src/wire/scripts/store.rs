//! The fenced write to a user's own Redis data (`distlock::fence::redis`): not a lock's key,
//! the key the user protects with one.
//!
//! A fenced value is a hash at the user's key: `value` (the data), `token` (the fencing token
//! that wrote it, decimal) and `lock` (the name of the lock whose token it is). A fenced delete
//! leaves a tombstone (`token` and `lock`, no `value`) that lives as long as it is told, so a
//! stale holder cannot write the value back meanwhile.
//!
//! Next to the values, a lock's *watermark* (a string key the caller names, in the lock name's
//! hash slot) holds the highest token of the lock that has written any of its keys, or claimed
//! them: a token below it lands on no key of the lock, including keys the newer token never
//! wrote. It lives as long as it is told after its last raise. A store that keeps no
//! watermark (per key) passes only the value's key.

/// One fenced write (`set` or `del`) to `KEYS[1]` checked against the lock's watermark
/// `KEYS[2]` (when given), or a `claim` that raises the watermark `KEYS[1]` alone.
///
/// ARGV: 1 = `set`, `del` or `claim`, 2 = the lock's name, 3 = the token (decimal, no leading
/// zeros), 4 = how long (ms) the watermark and a delete's tombstone are kept after this call
/// (`0`: for ever), 5 = the value (`set` only).
///
/// Replies 1 when a `set` or a `claim` landed (0/1 for a `del`: whether a value was there);
/// refuses with an error reply and changes nothing when the watermark or the key holds a
/// higher token (`DISTLOCK_FENCED <seen>`), the key was written under another lock
/// (`DISTLOCK_OTHER_LOCK <name>`), or the key or the watermark holds something that is not
/// distlock's (`DISTLOCK_UNFENCED <type>`, `DISTLOCK_BAD_MARK <type>`). Tokens compare as
/// unsigned decimal strings (length, then bytes): exact for every `u64`, where Lua's numbers
/// are not above 2^53. A landed call raises the watermark to its token (never lowers it: the
/// token is at least the watermark once it passed) and restarts its lifetime.
pub const FENCED_WRITE: &str = r#"
local op, lock, token, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local key, mark = KEYS[1], KEYS[2]
if op == 'claim' then
  key, mark = nil, KEYS[1]
end
local function below(theirs)
  return #token < #theirs or (#token == #theirs and token < theirs)
end
if mark then
  local kind = redis.call('TYPE', mark).ok
  if kind ~= 'none' then
    local seen = kind == 'string' and redis.call('GET', mark)
    if not seen or not string.match(seen, '^%d+$') then
      return redis.error_reply('DISTLOCK_BAD_MARK ' .. kind)
    end
    if below(seen) then
      return redis.error_reply('DISTLOCK_FENCED ' .. seen)
    end
  end
end
if key then
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'none' then
    if kind ~= 'hash' then
      return redis.error_reply('DISTLOCK_UNFENCED ' .. kind)
    end
    local seen = redis.call('HMGET', key, 'token', 'lock')
    if not seen[1] or not seen[2] then
      return redis.error_reply('DISTLOCK_UNFENCED hash')
    end
    if seen[2] ~= lock then
      return redis.error_reply('DISTLOCK_OTHER_LOCK ' .. seen[2])
    end
    if below(seen[1]) then
      return redis.error_reply('DISTLOCK_FENCED ' .. seen[1])
    end
  end
end
local reply = 1
if op == 'set' then
  redis.call('HSET', key, 'value', ARGV[5], 'token', token, 'lock', lock)
  redis.call('PERSIST', key)
elseif op == 'del' then
  reply = redis.call('HDEL', key, 'value')
  redis.call('HSET', key, 'token', token, 'lock', lock)
  if keep == '0' then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, keep)
  end
end
if mark then
  if keep == '0' then
    redis.call('SET', mark, token)
  else
    redis.call('SET', mark, token, 'PX', keep)
  end
end
return reply
"#;
