//! A lock's scripts: the fenced acquire (a plain one is `SET NX PX GET`, no script),
//! RedLock's acquire that takes a free lock only in its waiters' order (`ACQUIRE_QUEUED`, with
//! the grace of those ahead, `TURN_GRACE`), a waiter's turn on one server, Sentinel or a
//! cluster, where a release hands the lock (or a permit, see `ACQUIRE_PERMIT`) over (the grant
//! window and the ticket that carries it, a waiting lock's attempt, `ACQUIRE_HANDED`), a waiter
//! leaving its queue (`LEAVE_QUEUE`, RedLock's queue too), and the release of one lock or many,
//! which hands a lock let go to the first waiter queued for it (`grant_prelude!`) and lets a
//! permit or a read hold go the same way (`permit_prelude!`).

use std::time::Duration;

use tokio::time::Instant;

use crate::lease::millis_ceil;

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
    marks_prelude!(),
    r#"
local v = unmark(redis.pcall('GET', KEYS[1]))
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
/// be broadcast to every node), and optionally the value, ticket, id and entry life (ms, see
/// `entry_life`) of the releasing client's next waiter for the lock (see `release_lock` in
/// `grant_prelude!`: queued by this release, so it sends no attempt of its own).
/// Returns `{id, code}`: 0 released, -1 another owner holds it (nothing changed), -2 no lock (it
/// expired, or a replayed release already freed it), -3 the key is not a `d2` lock. With keep
/// ms > 0 (`min_hold` not reached yet) the lock is left to expire after keep ms instead of
/// being let go now; otherwise it is handed to the first waiter queued for it, or deleted and
/// waiters woken (`grant_prelude!`). A semaphore's key (a key that is not a string) releases
/// the permit of that value the same way, handing it to the first waiter queued for it
/// (`permit_handoff_prelude!`); a read hold's release wakes its waiters. A release nobody waits
/// for (`unwaited`) is decided before the other preludes' functions are made: a `GET` and a
/// `DEL` and nothing else.
pub const RELEASE: &str = concat!(
    marks_prelude!(),
    r#"
local v = redis.pcall('GET', KEYS[1])
if unwaited(v, ARGV[1], ARGV[3], KEYS[3], ARGV[5]) then
  redis.call('DEL', KEYS[1])
  return {ARGV[2], 0}
end
"#,
    holders_prelude!(),
    grant_prelude!(),
    r#"
if type(v) == 'table' then"#,
    permit_prelude!(),
    permit_handoff_prelude!(),
    r#"
  local code = permit_release(KEYS[1], ARGV[1], ARGV[3], KEYS[2], KEYS[3], KEYS[4], ARGV[4] == 's')
  return {ARGV[2], math.min(code, 0)}
end
return {ARGV[2], release_lock(KEYS[1], KEYS[2], KEYS[3], KEYS[4], v, ARGV[1], ARGV[3], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[4] == 's')}
"#
);

/// Release several locks in one call (a batch of releases that arrived together, see `batch`;
/// a set of locks held together).
///
/// KEYS: per lock, its lock key and release channel, and with handoff (the third ARGV `4`) its
/// queue and its waiters' request ids (see [`RELEASE`]). ARGV: the request id, `s` for sharded
/// release channels (else `-`), the keys per lock (`2` or `4`), then for each lock its value
/// (`d2:<owner>`) and keep ms, and with handoff (4 keys per lock) the value of the next waiter
/// to queue (empty: none), its ticket, its id and its entry's life (see [`RELEASE`]).
/// Returns `{id, codes}` with one code per lock, as [`RELEASE`] returns it (a permit's too).
pub const RELEASE_MANY: &str = concat!(
    holders_prelude!(),
    marks_prelude!(),
    grant_prelude!(),
    r#"
local out = {}
local per = tonumber(ARGV[3])
local stride = per == 4 and 6 or 2
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
    out[i] = release_lock(lock, chan, q, ids, v, value, keep, nv, ARGV[at + 4], ARGV[at + 5], ARGV[at + 6], sharded)
  else
    out[i] = release_lock(lock, chan, nil, nil, v, value, keep, nil, nil, nil, nil, sharded)
  end
end
return {ARGV[1], out}
"#
);

/// How long the waiters ahead of a RedLock caller that found the lock free still have to take
/// their turn (see [`ACQUIRE_QUEUED`]): a live waiter is woken by the release within
/// milliseconds (or looks again every 250 ms when its subscription reached too few masters),
/// so this is what a waiter that went away can cost the lock after a release, at most.
pub(crate) const TURN_GRACE: Duration = Duration::from_millis(300);

/// Acquire over a RedLock quorum (plain or fenced), in the order the waiters came: the
/// `:queue` of the lock holds one entry per waiting acquire (its lock value), scored by its
/// ticket (the caller's clock in µs when the acquire started, the same on every master, so
/// every master agrees who comes first and the waiters no longer split the masters between
/// them); `:queue:until` holds when each entry lapses (this master's clock, ms).
///
/// KEYS: lock, fence, queue, queue until. ARGV: value (`d2:<owner>`), ttl ms, fence retention
/// ms (0: no fencing token), request id, ticket (0: the caller does not wait), grace ms
/// (`TURN_GRACE`, 300 ms), `1` to queue the caller (a waiter's attempts after it subscribed: one
/// that takes the lock at its first attempt leaves no entry behind) or `0`, and the longest its
/// entry lives (ms, `entry_life`: its wait's end; 0 or absent: no such bound).
/// Returns `{id, {1, token, 0}}` (taken, or a replay of our own take; token 0 when not
/// fenced), `{id, {0, pttl, ahead}}` (held by another `d2` owner), `{id, {3, ms, ahead}}`
/// (free, but the `ahead` waiters queued before the caller come first: the first of them for
/// at most ms) or `{id, {2, 0, 0}}` (not a `d2` lock); `ahead` is 0 for a caller that does not
/// queue.
///
/// Lapsed entries are dropped first (no sweeper: the next call does it). A busy lock queues
/// the caller (if asked to) until the holder's pttl plus the grace: it tries again at the
/// release or at the pttl, and each attempt renews its entry. A free lock is taken only by the
/// caller with the lowest ticket present: one with waiters ahead is refused, gives those ahead
/// at most the grace more (so a waiter that went away holds the lock up that long at most) and
/// queues itself behind them. Taking removes the caller's entry; both keys expire with their
/// last entry. The queue only ever refuses a grant: exclusion rests on the lock key alone.
pub const ACQUIRE_QUEUED: &str = concat!(
    marks_prelude!(),
    r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
if #lapsed > 0 then
  redis.call('ZREM', KEYS[3], unpack(lapsed))
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
end
local v = unmark(redis.pcall('GET', KEYS[1]))
if type(v) == 'table' then
  return {ARGV[4], {2, 0, 0}}
end
local ticket = tonumber(ARGV[5])
local grace = tonumber(ARGV[6])
local function queue(ms)
  if ticket > 0 and ARGV[7] == '1' then
    local lapse = now + ms + grace
    if tonumber(ARGV[8] or '0') > 0 then
      lapse = math.min(lapse, now + tonumber(ARGV[8]))
    end
    redis.call('ZADD', KEYS[3], ticket, ARGV[1])
    redis.call('ZADD', KEYS[4], lapse, ARGV[1])
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    local keep = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', KEYS[3], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
local function fence_token(replay)
  if tonumber(ARGV[3]) == 0 then
    return 0
  end
  if replay then
    return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  end
  local tt = redis.call('TIME')
  local token = tonumber(tt[1]) * 1000000 + tonumber(tt[2])
  local prev = redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3], 'GET')
  local floor = tonumber(prev or '0')
  if floor == nil then
    redis.call('SET', KEYS[2], prev, 'PX', ARGV[3])
    return nil
  end
  if token <= floor then
    token = floor + 1
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
  end
  return token
end
if v == ARGV[1] then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {ARGV[4], {1, fence_token(true), 0}}
end
if v ~= false then
  if string.sub(v, 1, 3) ~= 'd2:' then
    return {ARGV[4], {2, 0, 0}}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl >= 0 then
    queue(pttl)
  else
    queue(1000)
  end
  local before = 0
  if ticket > 0 then
    before = redis.call('ZCOUNT', KEYS[3], '-inf', '(' .. ARGV[5])
  end
  return {ARGV[4], {0, pttl, before}}
end
local ahead
if ticket > 0 then
  ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[5])
else
  ahead = redis.call('ZRANGE', KEYS[3], 0, -1)
end
if #ahead > 0 then
  for i = 1, #ahead do
    redis.call('ZADD', KEYS[4], 'LT', now + grace, ahead[i])
  end
  local left = math.max(tonumber(redis.call('ZSCORE', KEYS[4], ahead[1])) - now, 1)
  queue(left)
  return {ARGV[4], {3, left, #ahead}}
end
local token = fence_token(false)
if token == nil then
  return redis.error_reply('ERR distlock: the fence key ' .. KEYS[2] .. ' does not hold a number; delete it to use this lock')
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[4], {1, token, 0}}
"#
);

/// The longest a lock handed to a queued waiter by a release (one server, Sentinel, a cluster:
/// see [`RELEASE`](super::RELEASE)) is granted for before its new holder extends it: a waiter
/// that went away can cost the lock this long at most (or its ttl, if shorter:
/// `grant_window`), never its ttl (see [`ACQUIRE_HANDED`]).
pub(crate) const GRANT_WINDOW: Duration = Duration::from_secs(1);

/// The grant window of a lock of `ttl`: `GRANT_WINDOW`, or the ttl if that is shorter.
pub(crate) fn grant_window(ttl: Duration) -> Duration {
    ttl.min(GRANT_WINDOW)
}

/// The ticket of a waiter to whom a release may hand the lock: when its acquire started, in ms
/// since the Unix epoch, times 1024, plus its grant window in ms (at most 1000): the queue's
/// order is still the waiters' arrival, and the release that hands the lock over reads the
/// window from the entry's own score, at no extra cost (exact in a score: below 2^53 for
/// another 270 years).
pub(crate) fn handed_ticket(started_ms: u64, window: Duration) -> u64 {
    let window = u64::try_from(window.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, 1000);
    started_ms.saturating_mul(1024).saturating_add(window)
}

/// The longest a waiter's entry in a queue lives in Redis after the attempt (or the release of
/// its client) that queued it: a live waiter looks again at least every second
/// (`lock::wait_loop`'s `HANDED_RECHECK`; RedLock's, at the holder's pttl), and each
/// look renews its entry; the entry of a waiter whose process died lapses within this, so it
/// is never handed the lock (see `grant_prelude!`: `head`).
pub(crate) const ENTRY_LAPSE: Duration = Duration::from_secs(3);

/// The life in ms of a queue entry made now for a waiter whose wait ends at `until`: until
/// then, and [`ENTRY_LAPSE`] at most (at least 1 ms: a waiter whose wait is over sends no
/// attempt).
pub(crate) fn entry_life(until: Option<Instant>) -> u64 {
    let left = until.map_or(ENTRY_LAPSE, |until| {
        until.saturating_duration_since(Instant::now())
    });
    millis_ceil(left.min(ENTRY_LAPSE)).max(1)
}

/// A lock's waiting attempt on one server, Sentinel or a cluster, where the lock is handed to
/// the first waiter of its queue when it is let go (`grant_prelude!`): the queue is `:queue`,
/// lock value → ticket (see `handed_ticket`: the waiters' order, and each one's grant window).
///
/// KEYS: lock, queue, release channel, the waiters' request ids (`queue:ids`), when each writer
/// waiting behind readers lapses (`queue:until`), and for a confirming waiter (fenced, or one
/// that asks for replicas) the fence key. ARGV: value
/// (`d2:<owner>`), ttl ms, request id, ticket, grant window ms, `s` for a sharded release
/// channel, the life of the caller's queue entry (ms, `entry_life`: it lapses then unless a
/// later attempt renews it, so a waiter whose wait ended or whose process died is never
/// handed the lock), and for a confirming waiter the fence retention ms (0: not fenced). A busy attempt
/// queues the caller and records its request id: the grant that hands it the lock names that
/// request (`grant` in `grant_prelude!`), so the waiter trusts the grant from that request's
/// send, never from a later one's. Returns `{id, {1, token}}` (ours: taken, or handed to us,
/// or a replay after a lost reply; its expiry raised to the ttl, so the lease counts from this
/// attempt; the token 0 unless fenced), `{id, {0, pttl}}` (held by another `d2` owner: the
/// caller is queued, and tries again at the latest at the pttl), `{id, {3, ms}}` (readers hold
/// it: the caller is queued behind them, the first reader's lease ends in ms, and the last
/// reader's release hands the caller the lock if it is first in line: a writer waits its turn
/// among readers and new readers queue behind it; it asks again within 500 ms, each time
/// pushing its lapse in `queue:until` 2 s on: a writer that stops asking went away, see
/// `turn_over`) or `{id, {2, 0}}` (neither a `d2` lock nor a `d2` set of readers).
///
/// A free lock is taken only by the first waiter: a lock found free with earlier waiters
/// queued is turned over to them now (`turn_over`: readers a share each, a writer the lock; as
/// a release would have: a holder that expired, or a waiter that went away after it was handed
/// the lock, let it go without a release) and the caller queues behind them. The queue key lasts as long as the latest holder's pttl plus a
/// window after each attempt: a waiter that went away without leaving costs the lock one
/// grant window when its turn comes, never its ttl. The queue only ever refuses a take:
/// exclusion rests on the lock key alone.
///
/// **A confirming waiter** does not trust a grant: the release handed it the lock without a
/// fencing token and without its replicas. It asks once more, and finding the lock its own
/// this script confirms it: the expiry is always written (raised to the ttl), so the `WAIT`
/// that follows covers the grant too (a replica applies the stream in order), and a fenced
/// waiter's token is raised here, while the lock is its own (`fence_raise`: above every token
/// handed out before, as `ACQUIRE_FENCED`'s). A free lock taken by a confirming waiter raises
/// its token before it is set; a fence key that does not hold a number fails the script before
/// it takes the lock.
pub const ACQUIRE_HANDED: &str = concat!(
    holders_prelude!(),
    marks_prelude!(),
    grant_prelude!(),
    fence_prelude!(),
    r#"
local confirm = ARGV[8] ~= nil
local function token()
  if not confirm then
    return 0
  end
  local t, bad = fence_raise(KEYS[6], ARGV[8])
  if bad then
    return fence_error(KEYS[6], 'lock')
  end
  return t
end
local sharded = ARGV[6] == 's'
local function queue(ms)
  enqueue(KEYS[2], KEYS[4], ARGV[1], ARGV[4], ARGV[3], ms, ARGV[7])
end
local raw = redis.pcall('GET', KEYS[1])
local v = unmark(raw)
if type(v) == 'table' then
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' or not redis.call('ZSCORE', KEYS[1], 'd2:readers') then
    return {ARGV[3], {2, 0}}
  end
  local now = permit_now()
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
  local first = redis.call('ZRANGE', KEYS[1], 1, 1, 'WITHSCORES')
  if first[1] then
    local ms = math.min(math.max(tonumber(first[2]) - now, 1), writer_lapse / 4)
    permit_settle(KEYS[1], now)
    queue(math.max(redis.call('PTTL', KEYS[1]), 0))
    redis.call('ZADD', KEYS[5], string.format('%d', now + writer_lapse), ARGV[1])
    if redis.call('PTTL', KEYS[5]) < 2 * writer_lapse then
      redis.call('PEXPIRE', KEYS[5], 2 * writer_lapse)
    end
    return {ARGV[3], {3, ms}}
  end
  redis.call('DEL', KEYS[1])
  v = false
end
if v == ARGV[1] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  redis.call('ZREM', KEYS[5], ARGV[1])
  local pttl = redis.call('PTTL', KEYS[1])
  if confirm then
    redis.call('PEXPIRE', KEYS[1], math.max(pttl, tonumber(ARGV[2])))
    local t = token()
    if type(t) == 'table' then
      return t
    end
    return {ARGV[3], {1, t}}
  end
  if pttl < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {ARGV[3], {1, 0}}
end
if v and string.sub(v, 1, 3) ~= 'd2:' then
  return {ARGV[3], {2, 0}}
end
if v then
  local pttl = redis.call('PTTL', KEYS[1])
  queue(math.max(pttl, 0))
  mark(KEYS[1], raw)
  return {ARGV[3], {0, pttl}}
end
local turned = turn_over(KEYS[1], KEYS[3], KEYS[2], KEYS[4], nil, tonumber(ARGV[4]), sharded, nil)
if turned then
  local pttl = math.max(redis.call('PTTL', KEYS[1]), 1)
  queue(pttl)
  if turned == 'readers' then
    return {ARGV[3], {3, pttl}}
  end
  return {ARGV[3], {0, pttl}}
end
local t = token()
if type(t) == 'table' then
  return t
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
local value = ARGV[1]
if redis.call('ZCARD', KEYS[2]) > 0 then
  value = value .. '+'
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {ARGV[3], {1, t}}
"#
);

/// A waiter whose acquire ended (without the lock, or over RedLock with it too: see
/// `lock::queue_entry::QueueEntry`) takes its entry out of the queue (see
/// [`ACQUIRE_QUEUED`](super::ACQUIRE_QUEUED), [`ACQUIRE_HANDED`]), so the waiters behind it
/// need not wait out its grace or its grant.
/// Given the lock and its release channel too (one server, Sentinel, a cluster, where a release
/// may have handed it the lock: a waiter leaving without it), a lock holding its value is let
/// go: handed on to the next waiter, or deleted (`grant_prelude!`); a semaphore holding it as
/// a permit (handed over, never confirmed) lets that permit go the same way
/// (`permit_handoff_prelude!`).
///
/// KEYS: per lock (one, or each lock of a set), its queue, queue until, and (where a release
/// may have handed it over) the lock, its release channel and the waiters' request ids: 2 or 5
/// keys per lock. ARGV: value (`d2:<owner>`), request id, `s` for a sharded release channel
/// (else `-`), and the keys per lock (`2` or `5`). Returns `{id, removed}` (entries removed, all locks together).
pub const LEAVE_QUEUE: &str = concat!(
    holders_prelude!(),
    marks_prelude!(),
    grant_prelude!(),
    permit_prelude!(),
    permit_handoff_prelude!(),
    r#"
local per = tonumber(ARGV[4])
local removed = 0
for at = 0, #KEYS - per, per do
  local q = KEYS[at + 1]
  redis.call('ZREM', KEYS[at + 2], ARGV[1])
  removed = removed + redis.call('ZREM', q, ARGV[1])
  if per >= 5 then
    local lock, chan, ids = KEYS[at + 3], KEYS[at + 4], KEYS[at + 5]
    redis.call('HDEL', ids, ARGV[1])
    local v = unmark(redis.pcall('GET', lock))
    if v == ARGV[1] then
      let_go(lock, chan, q, ids, ARGV[3] == 's')
    elseif type(v) == 'table' then
      permit_release(lock, ARGV[1], 0, chan, q, ids, ARGV[3] == 's')
    end
  end
end
return {ARGV[2], removed}
"#
);
