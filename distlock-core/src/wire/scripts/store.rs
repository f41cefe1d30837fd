//! The fenced write to a user's own Redis data (`distlock::fence::redis`): not a lock's key,
//! the key the user protects with one.
//!
//! A fenced value is a hash at the user's key: `value` (the data), `token` (the fencing token
//! that wrote it, decimal) and `lock` (the name of the lock whose token it is). The token lives
//! in the value's own key, so it shares its hash slot (cluster-safe) and its lifetime: a value
//! that expires or is deleted by hand takes its token with it. A fenced delete leaves a
//! tombstone (`token` and `lock`, no `value`) that expires after the time it is given, so a
//! stale holder cannot write the value back while it lives.

/// One fenced write (`set` or `del`) to `KEYS[1]`.
///
/// ARGV: 1 = `set` or `del`, 2 = the lock's name, 3 = the token (decimal, no leading zeros),
/// 4 = the value (`set`) or the tombstone's lifetime in ms (`del`).
///
/// Replies 1 when a `set` landed (0/1 for a `del`: whether a value was there); refuses with an
/// error reply and changes nothing when the key holds a higher token (`DISTLOCK_FENCED
/// <seen>`), was written under another lock (`DISTLOCK_OTHER_LOCK <name>`) or holds something
/// that is not a fenced value (`DISTLOCK_UNFENCED <type>`). Tokens compare as unsigned
/// decimal strings (length, then bytes): exact for every `u64`, where Lua's numbers are not
/// above 2^53.
pub const FENCED_WRITE: &str = r#"
local key = KEYS[1]
local kind = redis.call('TYPE', key).ok
if kind ~= 'none' then
  if kind ~= 'hash' then
    return redis.error_reply('DISTLOCK_UNFENCED ' .. kind)
  end
  local seen = redis.call('HMGET', key, 'token', 'lock')
  if not seen[1] or not seen[2] then
    return redis.error_reply('DISTLOCK_UNFENCED hash')
  end
  if seen[2] ~= ARGV[2] then
    return redis.error_reply('DISTLOCK_OTHER_LOCK ' .. seen[2])
  end
  local mine, theirs = ARGV[3], seen[1]
  if #mine < #theirs or (#mine == #theirs and mine < theirs) then
    return redis.error_reply('DISTLOCK_FENCED ' .. theirs)
  end
end
if ARGV[1] == 'set' then
  redis.call('HSET', key, 'value', ARGV[4], 'token', ARGV[3], 'lock', ARGV[2])
  redis.call('PERSIST', key)
  return 1
end
local had = redis.call('HDEL', key, 'value')
redis.call('HSET', key, 'token', ARGV[3], 'lock', ARGV[2])
redis.call('PEXPIRE', key, ARGV[4])
return had
"#;
