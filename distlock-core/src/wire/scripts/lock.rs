//! A lock's own scripts: the fenced acquire (a plain one is `SET NX PX GET`, no script) and the
//! release of one lock or many, which hands a lock let go to the first waiter queued for it
//! (`grant_prelude!`) and lets a permit or a read hold go the same way (`permit_prelude!`).

/// Fenced acquire: take the lock and hand out a fencing token.
///
/// KEYS: lock, fence. ARGV: value (`d2:<owner>`), ttl ms, fence retention ms, request id.
/// Returns `{id, {1, token}}` (taken, or a replay of our own take), `{id, {0, pttl}}` (held by
/// another `d2` owner) or `{id, {2, 0}}` (the key holds something that is not a `d2` lock).
///
/// The token is the server's clock in microseconds, raised above the last token handed out for
/// this name (`fence_raise`: the fence floor, kept for the retention time, read and written by
/// one `SET ... GET`), so it strictly increases per name while the fence key stays bounded in
/// memory. A replay reads the floor back: nobody can have raised it while we hold the lock. A
/// fence key that does not hold a number is put back as it was (expiring after the retention)
/// and the script fails before it takes the lock.
pub const ACQUIRE_FENCED: &str = concat!(
    fence_prelude!(),
    r#"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {ARGV[4], {2, 0}}
end
if v == false then
  local token, bad = fence_raise(KEYS[2], ARGV[3])
  if bad then
    return fence_error(KEYS[2], 'lock')
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
"#
);

/// Release.
///
/// KEYS: lock, release channel, and (one server, Sentinel, a cluster: where a lock let go is
/// handed to its first waiter) the lock's queue and its waiters' request ids (`queue:ids`).
/// ARGV: value (`d2:<owner>`), request id, keep ms, `s` for a sharded release channel (a
/// cluster: `SPUBLISH` reaches the subscribers of the lock's own shard, where `PUBLISH` would
/// be broadcast to every node), and optionally the value, ticket and id of the releasing
/// client's next waiter for the lock (see `release_lock` in `grant_prelude!`: queued by this
/// release, so it sends no attempt of its own).
/// Returns `{id, code}`: 0 released, -1 another owner holds it (nothing changed), -2 no lock (it
/// expired, or a replayed release already freed it), -3 the key is not a `d2` lock. With keep
/// ms > 0 (`min_hold` not reached yet) the lock is left to expire after keep ms instead of
/// being let go now; otherwise it is handed to the first waiter queued for it, or deleted and
/// waiters woken (`grant_prelude!`). A semaphore's key (a key that is not a string) releases
/// the permit of that value the same way, handing it to the first waiter queued for it
/// (`permit_handoff_prelude!`); a read hold's release wakes its waiters.
pub const RELEASE: &str = concat!(
    holders_prelude!(),
    grant_prelude!(),
    r#"
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then"#,
    permit_prelude!(),
    permit_handoff_prelude!(),
    r#"
  local code = permit_release(KEYS[1], ARGV[1], ARGV[3], KEYS[2], KEYS[3], KEYS[4], ARGV[4] == 's')
  return {ARGV[2], math.min(code, 0)}
end
return {ARGV[2], release_lock(KEYS[1], KEYS[2], KEYS[3], KEYS[4], v, ARGV[1], ARGV[3], ARGV[5], ARGV[6], ARGV[7], ARGV[4] == 's')}
"#
);

/// Release several locks in one call (a batch of releases that arrived together, see `batch`;
/// a set of locks held together).
///
/// KEYS: per lock, its lock key and release channel, and with handoff (the third ARGV `4`) its
/// queue and its waiters' request ids (see [`RELEASE`]). ARGV: the request id, `s` for sharded
/// release channels (else `-`), the keys per lock (`2` or `4`), then for each lock its value
/// (`d2:<owner>`) and keep ms, and with handoff (4 keys per lock) the value of the next waiter
/// to queue (empty: none), its ticket and its id (see [`RELEASE`]).
/// Returns `{id, codes}` with one code per lock, as [`RELEASE`] returns it (a permit's too).
pub const RELEASE_MANY: &str = concat!(
    holders_prelude!(),
    grant_prelude!(),
    r#"
local out = {}
local per = tonumber(ARGV[3])
local stride = per == 4 and 5 or 2
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
    permit_handoff_prelude!(),
    r#"
    local q, ids
    if per == 4 then
      q, ids = KEYS[per * (i - 1) + 3], KEYS[per * (i - 1) + 4]
    end
    out[i] = math.min(permit_release(lock, value, keep, chan, q, ids, sharded), 0)
  elseif per == 4 then
    local nv = ARGV[at + 3]
    if nv == '' then
      nv = nil
    end
    local q, ids = KEYS[per * (i - 1) + 3], KEYS[per * (i - 1) + 4]
    out[i] = release_lock(lock, chan, q, ids, v, value, keep, nv, ARGV[at + 4], ARGV[at + 5], sharded)
  else
    out[i] = release_lock(lock, chan, nil, nil, v, value, keep, nil, nil, nil, sharded)
  end
end
return {ARGV[1], out}
"#
);
