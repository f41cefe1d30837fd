//! Renewal of a batch of leases, locks, permits and read holds alike (`RENEW`).

/// Renew a batch of leases (and check a re-entry: a batch of one).
///
/// KEYS: lock keys. ARGV: the request id, then for each key its ttl ms and its value (a lock
/// marked by its waiters is its owner's all the same, see `marks_prelude!`).
/// Returns `{id, statuses}` with one status per key: 1 ours (its expiry now reaches at least the
/// ttl), 0 gone, -1 another owner's, -2 not a `d2` lock. Renewal only ever extends a key's
/// expiry (never shortens one that another hold relies on), and one bad key does not fail the
/// others: each key is read with `pcall`. A semaphore's key (not a string) renews the permit
/// of that value the same way (only extends; 0 when the permit's lease ended), see
/// `permit_prelude!`.
pub const RENEW: &str = concat!(
    marks_prelude!(),
    r#"
local out = {}
for i, key in ipairs(KEYS) do
  local v = unmark(redis.pcall('GET', key))
  if type(v) == 'table' then"#,
    holders_prelude!(),
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
