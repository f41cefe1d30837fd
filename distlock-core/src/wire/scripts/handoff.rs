//! A waiter's turn on one server, Sentinel or a cluster, where a release hands the lock (or a
//! permit, see `ACQUIRE_PERMIT`) over: the grant window and the ticket that carries it, a
//! waiting lock's attempt (`ACQUIRE_HANDED`), and a waiter leaving its queue (`LEAVE_QUEUE`,
//! RedLock's queue too).

use std::time::Duration;

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

/// A lock's waiting attempt on one server, Sentinel or a cluster, where the lock is handed to
/// the first waiter of its queue when it is let go (`grant_prelude!`): the queue is `:queue`,
/// lock value → ticket (see `handed_ticket`: the waiters' order, and each one's grant window).
///
/// KEYS: lock, queue, release channel, the waiters' request ids (`queue:ids`), when each writer
/// waiting behind readers lapses (`queue:until`), and for a confirming waiter (fenced, or one
/// that asks for replicas) the fence key. ARGV: value
/// (`d2:<owner>`), ttl ms, request id, ticket, grant window ms, `s` for a sharded release
/// channel, and for a confirming waiter the fence retention ms (0: not fenced). A busy attempt
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
    grant_prelude!(),
    fence_prelude!(),
    r#"
local confirm = ARGV[7] ~= nil
local function token()
  if not confirm then
    return 0
  end
  local t, bad = fence_raise(KEYS[6], ARGV[7])
  if bad then
    return fence_error(KEYS[6], 'lock')
  end
  return t
end
local sharded = ARGV[6] == 's'
local function queue(ms)
  enqueue(KEYS[2], KEYS[4], ARGV[1], ARGV[4], ARGV[3], ms)
end
local v = redis.pcall('GET', KEYS[1])
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
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
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
    local v = redis.pcall('GET', lock)
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
