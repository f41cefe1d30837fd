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

/// A new leader proclaims its term.
///
/// KEYS: lock, fence, leader, leader terms, release channel. ARGV: request id, the lock value
/// (`d2:<owner>`), the fencing token of the hold (decimal), identity, retention ms (of the
/// fence floor and the record), `s` for a sharded channel or `-`.
///
/// Returns `{id, {1, term, since}}` (proclaimed; a replay of our own proclaim returns the term it
/// wrote and only renews the record's expiry: how a leader keeps its record) or `{id, {0, '0', 0}}`
/// (the lock is not held by this value: nothing written). The term is the token, or one above the
/// last term written when that is not below it (a fence floor lost and a clock behind): terms only
/// rise. The fence floor is raised to the term, so later holders' tokens are above it; the term is
/// added to the terms list and a wake (`1`) is published on the release channel, where observers
/// (and the lock's waiters, who try again) hear it.
pub const LEADER_PROCLAIM: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return {ARGV[1], {0, '0', 0}}
end
local rec = redis.call('HMGET', KEYS[3], 'term', 'owner', 'since')
if rec[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
  return {ARGV[1], {1, rec[1], tonumber(rec[3])}}
end
local term = ARGV[3]
local seen = rec[1]
if seen and (#seen > #term or (#seen == #term and seen >= term)) then
  term = string.format('%d', tonumber(seen) + 1)
end
local floor = redis.call('GET', KEYS[2])
if (not floor) or #floor < #term or (#floor == #term and floor < term) then
  redis.call('SET', KEYS[2], term, 'PX', ARGV[5])
end
local t = redis.call('TIME')
local since = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[3], 'term', term, 'identity', ARGV[4], 'since', since, 'owner', ARGV[2])
redis.call('LPUSH', KEYS[4], term .. ' ' .. since .. ' ' .. ARGV[4])
redis.call('LTRIM', KEYS[4], 0, 31)
redis.call('PEXPIRE', KEYS[3], ARGV[5])
redis.call('PEXPIRE', KEYS[4], ARGV[5])
if ARGV[6] == 's' then
  redis.call('SPUBLISH', KEYS[5], '1')
else
  redis.call('PUBLISH', KEYS[5], '1')
end
return {ARGV[1], {1, term, since}}
"#;

/// The current leader of a name, for observers and operators.
///
/// KEYS: lock, leader, leader terms. ARGV: request id.
///
/// Returns `{id, {held, term, identity, since, owner, pttl, terms}}`: `held` 1 when the lock
/// holds the record's owner (the record names the leader), `pttl` the lock's (ms; negative
/// when there is no lock), `terms` the terms list, newest first.
pub const LEADER_CURRENT: &str = r#"
local rec = redis.call('HMGET', KEYS[2], 'term', 'identity', 'since', 'owner')
local held = 0
if rec[4] and redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == rec[4] then
  held = 1
end
local terms = redis.call('LRANGE', KEYS[3], 0, -1)
return {ARGV[1], {held, rec[1] or '0', rec[2] or '', tonumber(rec[3] or '0'), rec[4] or '', redis.call('PTTL', KEYS[1]), terms}}
"#;
