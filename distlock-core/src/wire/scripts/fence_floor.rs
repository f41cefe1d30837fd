//! The fence floor of a RedLock quorum's fenced acquire, read and raised on its own
//! (`FENCE_FLOOR`), for every kind of hold.

/// Fence floor of a RedLock quorum's fenced acquire (see `deploy/redlock/token`): read it, and raise
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
