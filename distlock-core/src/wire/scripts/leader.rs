//! A leader election's record (`distlock::leader`): who leads a name, since when, in which term.
//!
//! The election is a fenced lock of the name (its waiters queue and are handed the lock in
//! turn); the leader is its holder. Next to the lock, in its hash slot:
//!
//! * `prefix:{name}:leader`, a hash: `term` (the leader's fencing token, decimal), `identity`
//!   (what followers see), `since` (the server's clock when the term started, ms) and `owner`
//!   (the lock value of the leader's hold). It names the leader only while the lock holds that
//!   value: a leader that resigned or died leaves a record that names nobody.
//! * `prefix:{name}:leader:terms`, a list of the last [`TERMS_KEPT`] terms, newest first, each
//!   `<term> <since> <identity>`, so an observer that woke late still sees every term in order.
//!
//! Neither grows, and neither outlives the elections of its name for long: both expire a
//! retention ([`Config::fence_retention`](crate::Config::fence_retention), at least the
//! ttl) after they were last written. A leader writes them again (the same proclaim, which
//! for the record's own owner only renews the expiry) every third of that while it leads, so
//! the record of a live leader never expires; a name no longer elected leaves nothing behind.

/// How many terms `prefix:{name}:leader:terms` keeps.
pub const TERMS_KEPT: usize = 32;

/// A new leader proclaims its term; a leader keeps its record, or changes what followers see.
///
/// KEYS: lock, fence, leader, leader terms, release channel. ARGV: request id, the lock value
/// (`d2:<owner>`), the fencing token of the hold (decimal), identity, retention ms (of the
/// fence floor and the record), `s` for a sharded channel or `-`, `known` (the highest term the
/// client has seen of the name, decimal, `0` for none), `exact` (a term to write, decimal, `0`
/// for none: RedLock's agreement round), and the mode: `n` (proclaim, or keep the record
/// already ours) or `v` (ours: show the new identity).
///
/// Returns `{id, {status, term, since}}`:
/// * `0`: the lock is not held by this value: nothing written.
/// * `1`: the term is written. A new term is the token, or one above the last term written
///   (the record's) and above `known` when the token is not: terms only rise, even after the
///   fence floor was lost and with a clock behind. With `exact`, exactly that term (the
///   record of our own hold is moved up to it). The record already ours is kept as it is
///   (only its expiry and the fence floor's renewed: how a leader keeps its record), or shows
///   the new identity (`v`).
/// * `2` (only with `exact`): not written: this server's own last term needs a term above
///   `term`, which is returned (the next round proposes it).
///
/// Every written term raises the fence floor to it (kept the retention, renewed with the
/// record), so later holders' tokens are above it; a new term or identity is added to (or
/// replaces the head of) the terms list, and a wake (`1`) is published on the release channel,
/// where observers (and the lock's waiters, who try again) hear it. The lock is marked as one
/// its waiters wait for (`marks_prelude!`): observers wait for its release too, so the release
/// always publishes.
pub const LEADER_PROCLAIM: &str = concat!(
    marks_prelude!(),
    r#"
local raw = redis.call('GET', KEYS[1])
if unmark(raw) ~= ARGV[2] then
  return {ARGV[1], {0, '0', 0}}
end
mark(KEYS[1], raw)
local retention = ARGV[5]
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end
local function plus1(a)
  return string.format('%d', tonumber(a) + 1)
end
local function keep(term)
  local floor = redis.call('GET', KEYS[2])
  if (not floor) or above(term, floor) then
    redis.call('SET', KEYS[2], term, 'PX', retention)
  else
    local left = redis.call('PTTL', KEYS[2])
    if left >= 0 and left < tonumber(retention) then
      redis.call('PEXPIRE', KEYS[2], retention)
    end
  end
  redis.call('PEXPIRE', KEYS[3], retention)
  redis.call('PEXPIRE', KEYS[4], retention)
end
local function wake()
  if ARGV[6] == 's' then
    redis.call('SPUBLISH', KEYS[5], '1')
  else
    redis.call('PUBLISH', KEYS[5], '1')
  end
end
local exact = ARGV[8]
local rec = redis.call('HMGET', KEYS[3], 'term', 'owner', 'since', 'identity')
if rec[2] == ARGV[2] then
  local term, identity, changed = rec[1], rec[4] or '', false
  if exact ~= '0' and above(exact, term) then
    term, changed = exact, true
  end
  if ARGV[9] == 'v' and identity ~= ARGV[4] then
    identity, changed = ARGV[4], true
  end
  if changed then
    redis.call('HSET', KEYS[3], 'term', term, 'identity', identity)
    local entry = term .. ' ' .. rec[3] .. ' ' .. identity
    local head = redis.call('LINDEX', KEYS[4], 0)
    if head and string.sub(head, 1, #rec[1] + 1) == rec[1] .. ' ' then
      redis.call('LSET', KEYS[4], 0, entry)
    else
      redis.call('LPUSH', KEYS[4], entry)
      redis.call('LTRIM', KEYS[4], 0, 31)
    end
  end
  keep(term)
  if changed then
    wake()
  end
  return {ARGV[1], {1, term, tonumber(rec[3])}}
end
local term = ARGV[3]
local seen = rec[1]
if seen and not above(term, seen) then
  term = plus1(seen)
end
if not above(term, ARGV[7]) then
  term = plus1(ARGV[7])
end
if exact ~= '0' then
  if above(term, exact) then
    return {ARGV[1], {2, term, 0}}
  end
  term = exact
end
local t = redis.call('TIME')
local since = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[3], 'term', term, 'identity', ARGV[4], 'since', since, 'owner', ARGV[2])
redis.call('LPUSH', KEYS[4], term .. ' ' .. since .. ' ' .. ARGV[4])
redis.call('LTRIM', KEYS[4], 0, 31)
keep(term)
wake()
return {ARGV[1], {1, term, since}}
"#
);

/// The current leader of a name, for observers and operators.
///
/// KEYS: lock, leader, leader terms. ARGV: request id.
///
/// Returns `{id, {held, term, identity, since, owner, pttl, terms}}`: `held` 1 when the lock
/// holds the record's owner (the record names the leader), `pttl` the lock's (ms; negative
/// when there is no lock), `terms` the terms list, newest first.
pub const LEADER_CURRENT: &str = concat!(
    marks_prelude!(),
    r#"
local rec = redis.call('HMGET', KEYS[2], 'term', 'identity', 'since', 'owner')
local held = 0
if rec[4] and redis.call('TYPE', KEYS[1]).ok == 'string' and unmark(redis.call('GET', KEYS[1])) == rec[4] then
  held = 1
end
local terms = redis.call('LRANGE', KEYS[3], 0, -1)
return {ARGV[1], {held, rec[1] or '0', rec[2] or '', tonumber(rec[3] or '0'), rec[4] or '', redis.call('PTTL', KEYS[1]), terms}}
"#
);

/// A candidate enters (or stays in) an election's candidates, or leaves them.
///
/// KEYS: the candidates hash (`prefix:{name}:leader:candidates`: client id → what followers
/// will see of it). ARGV: request id, the client id (`d2:<hex>`), its identity (empty: it
/// leaves), how long the hash is kept (ms) after this write.
///
/// Returns `{id, 1}`. A candidate refreshes its entry while it campaigns and leads; a process
/// that dies leaves its entry until no candidate writes the hash for that long (it is shown only
/// while the client's waiter is in the lock's queue: [`LEADER_CANDIDATES`]).
pub const LEADER_CANDIDATE: &str = r#"
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return {ARGV[1], 1}
"#;

/// The candidates of an election in line: the lock's holder and its queue, with what each
/// candidate said it is.
///
/// KEYS: lock, queue, candidates hash. ARGV: request id.
///
/// Returns `{id, {holder, queue, candidates}}`: `holder` the lock's value (empty without one, or
/// when the key is not a lock), `queue` the waiters' values in arrival order (their tickets),
/// `candidates` the hash as `{client id, identity, ...}`.
pub const LEADER_CANDIDATES: &str = concat!(
    marks_prelude!(),
    r#"
local holder = ''
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  holder = unmark(redis.call('GET', KEYS[1]))
end
local queue = {}
if redis.call('TYPE', KEYS[2]).ok == 'zset' then
  queue = redis.call('ZRANGE', KEYS[2], 0, -1)
end
return {ARGV[1], {holder, queue, redis.call('HGETALL', KEYS[3])}}
"#
);
