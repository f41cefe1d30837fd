//! The Lua functions several scripts share, as macros (so that `concat!` makes each script one
//! constant string), defined here before the script files so each can use them. Each names the
//! preludes it needs before it in a script:
//!
//! * `holders_prelude!`: the server's clock and a sorted set of holders' expiry;
//! * `permit_prelude!` (after `holders_prelude!`): a semaphore's count, a set of holders'
//!   mark, a permit's or a read hold's renewal;
//! * `marks_prelude!`: a lock's waiters mark (`unmark`, `mark`);
//! * `grant_prelude!` (after `holders_prelude!` and `marks_prelude!`): a lock let go or handed
//!   over, in turn to the writers and readers queued for it;
//! * `permit_handoff_prelude!` (after the three above): a permit or a read hold let go, and a
//!   freed permit handed over;
//! * `fence_prelude!`: the fence raise.

/// The Lua functions on a sorted set of holders (a semaphore's, or readers') that every script
/// touching one needs: `permit_now`, the server's clock in ms (`TIME`: deadlines are in it), and
/// `permit_settle`, the key's own expiry set to its latest deadline (the count or readers
/// member's negative score is below every deadline), or the key deleted when none is left. The
/// lock scripts define them inside their branch for a key that is not a string where they can,
/// so a lock's renewal never pays for making them.
macro_rules! holders_prelude {
    () => {
        r#"
local function permit_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function permit_settle(key, now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local at = tonumber(last[2] or '0')
  if at <= now then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, string.format('%d', at - now))
  end
end
"#
    };
}

/// The Lua functions on a semaphore's or readers' sorted set shared by [`ACQUIRE_PERMIT`],
/// [`ACQUIRE_READ`], [`RENEW`], [`RELEASE`], [`RELEASE_MANY`] and [`LEAVE_QUEUE`] (after
/// `holders_prelude!`): `permit_count`, a semaphore's `n` (its count member's score is `-n`);
/// `permit_set`, true for a `d2` set of holders (permits or readers); `permit_renew`, a
/// holder's renewal (only ever extends).
///
/// [`ACQUIRE_PERMIT`]: super::ACQUIRE_PERMIT
/// [`ACQUIRE_READ`]: super::ACQUIRE_READ
/// [`RENEW`]: super::RENEW
/// [`RELEASE`]: super::RELEASE
/// [`RELEASE_MANY`]: super::RELEASE_MANY
/// [`LEAVE_QUEUE`]: super::LEAVE_QUEUE
macro_rules! permit_prelude {
    () => {
        r#"
local function permit_count(key)
  if redis.call('TYPE', key)['ok'] ~= 'zset' then
    return nil
  end
  local n = redis.call('ZSCORE', key, 'd2:permits')
  if not n then
    return nil
  end
  return -tonumber(n)
end
local function permit_set(key)
  if redis.call('TYPE', key)['ok'] ~= 'zset' then
    return false
  end
  return redis.call('ZSCORE', key, 'd2:permits') or redis.call('ZSCORE', key, 'd2:readers')
end
local function permit_renew(key, value, ttl)
  if not permit_set(key) then
    return -2
  end
  local now = permit_now()
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local s = redis.call('ZSCORE', key, value)
  if s then
    redis.call('ZADD', key, 'GT', string.format('%d', now + tonumber(ttl)), value)
  end
  permit_settle(key, now)
  if s then
    return 1
  end
  return 0
end
"#
    };
}

/// A lock's waiters mark: a lock someone waits for holds its value followed by `+`
/// (`d2:<owner>+`), as a futex holds "locked, with waiters". The plain acquire writes the value
/// unmarked; every waiter marks the lock it finds held before it waits for its release (queued
/// in its turn, or subscribed and retrying), and a lock handed over is set marked. So a release
/// that finds the lock unmarked knows nobody waits for it: it deletes the lock, with no queue
/// read and no message (`release_lock`). Everything that compares a lock with its owner's
/// value reads it through `unmark` first (a mark never makes one owner's value another's: `+`
/// is in no owner id).
///
/// * `unmark`: the value without its mark (anything else, `false` or an error table, as it is).
/// * `mark`: a lock held with the value `v` (as read) marked, its expiry kept.
/// * `unwaited`: a release (of `value`, keep ms `keep`, next waiter `nv`) that finds the lock
///   holding `raw` is one nobody waits for: the owner's lock, unmarked, let go now (no keep),
///   carrying no next waiter, where a release hands over (the queue `q` given; over RedLock
///   every release wakes). Such a release only deletes the lock (`RELEASE`, `release_lock`).
macro_rules! marks_prelude {
    () => {
        r#"
local function unmark(v)
  if type(v) == 'string' and string.byte(v, -1) == 43 then
    return string.sub(v, 1, -2)
  end
  return v
end
local function mark(lock, v)
  if string.byte(v, -1) ~= 43 then
    redis.call('SET', lock, v .. '+', 'KEEPTTL')
  end
end
local function unwaited(raw, value, keep, q, nv)
  return raw == value and q ~= nil and not nv and tonumber(keep) <= 0
end
"#
    };
}

/// How a lock is let go and handed over, shared by [`RELEASE`], [`RELEASE_MANY`],
/// [`LEAVE_QUEUE`], [`ACQUIRE_HANDED`], [`ACQUIRE_ALL`], [`ACQUIRE_PERMIT`] and
/// [`ACQUIRE_READ`] (after `holders_prelude!` and `marks_prelude!`).
///
/// The queue (`prefix:{name}:queue`: value → ticket, see `handed_ticket`) holds a lock's
/// writers and readers alike (and a semaphore's waiters); `queue:ids` records, for each, when
/// its entry lapses (the server's clock, ms) and the request that last queued it, prefixed `r:`
/// for a reader (`<lapse> <id>`; an entry without a lapse, `<id>` alone, never lapses).
///
/// * `enqueue`: a waiter queued (`value` at `ticket`, its request `id`), its entry lapsing
///   `life` ms from now (`entry_life`: when its wait ends, 3 s at most; each attempt renews
///   it), the queue and its ids kept for `ms` (the holders' time left) plus the waiter's window
///   at least.
/// * `head`: the first entry (with a ticket below `below`, if given) whose lapse has not
///   passed, and its request id; lapsed entries met on the way are taken out. So a waiter whose
///   wait ended, or whose process died (nobody renews its entry), is never handed the hold.
/// * `sweep`: run by an attempt that finds the hold free (a lock, or a permit) while a waiter is
///   queued ahead of it, which only a holder that lapsed leaves: every `queue:ids` field that is
///   neither queued nor a live holder (`holds`: a semaphore's member) is a grantee whose hold
///   lapsed in its hands (`grant` leaves the field, the record of the grant, until its holder
///   lets go: `release_lock`, `permit_release`). Its client (the value up to its last `:`) is
///   taken for gone: its field and every queued entry of that client are taken out, so a killed
///   process's waiters cost the living one grant window in all, not one each. A live client
///   taken for gone (its hold ran out in a stall) only queues again at its waiters' next look,
///   with their tickets.
/// * `grant`: the first waiter's entry taken out (its field kept, see `sweep`) and the message
///   that names it and that request (`<value> <request id>`: the waiter trusts the grant from
///   that request's send only, since a message can reach it after a later attempt of its own
///   found the lock another's); returns its grant window (from its ticket).
/// * `turn_over`: the lock (a writer's being let go, `held` `string`; a set of readers, `zset`;
///   or free) handed to the waiters at the head of its queue, in their order (those with a
///   ticket below `below`, if given: an attempt hands the lock to the waiters ahead of it):
///   readers each get a share for their grant window (a member of the readers' set), as many as
///   come in a row; a writer gets the lock for its window (set to its value) if no reader holds
///   it, marked (others may still wait behind it). Returns `readers` (shares handed), `handed`
///   (a writer handed the lock), `writer` (a
///   writer at the head waits for the readers inside), or nothing (nobody queued ahead).
///   Given `lapses` (`queue:until`: when each writer waiting behind readers lapses), a writer at
///   the head that waits for readers and has not asked again within `writer_lapse` (2 s; it
///   asks at least every 500 ms there, see [`ACQUIRE_HANDED`]) went away: its entry is taken
///   out and the next waiter's turn comes (`writer_waits` starts the clock of one that never
///   asked behind readers). So a writer whose process died holds new readers up for 2 s at
///   most.
/// * `let_go`: a writer's lock let go: with the queue given (one server, Sentinel, a cluster;
///   not over RedLock) handed over (`turn_over`), otherwise, or with nobody queued, deleted and
///   the message `1`, a plain wake.
/// * `release_lock`: a `d2` lock's release (`raw`: what the lock key holds, `false` if
///   nothing), as [`RELEASE`] returns its code. A release nobody waits for (`unwaited`,
///   `marks_prelude!`) deletes the lock and nothing more: the uncontended release costs Redis a
///   `GET` and a `DEL`. Any other takes its own `queue:ids` field (a grant's record) out first,
///   whatever it finds (a release too late for its lease, or of a lock another owner took, ends
///   the grant as much as one in time: its record left behind would make a later sweep take its
///   live client for gone), and a release in time is let go (`let_go`). With a next waiter (`nv`, its ticket `nt` and the id `nid`
///   its grant will name: a waiter of the releasing client that waits in the client behind one
///   already queued, see `client::waiting::cohort`) the release queues it first (unless the
///   lock is that waiter's already: it took it by an attempt of its own), whatever else it
///   finds, and keeps the queue keys for the lock's pttl and that waiter's window (`enqueue`): a lock found
///   free is then handed to the first waiter at once, as [`ACQUIRE_HANDED`] would, and the
///   waiter sends no attempt of its own. Queued behind a lock another owner holds, the waiter
///   marks it, so that owner's release hands it over and publishes.
///
/// [`RELEASE`]: super::RELEASE
/// [`RELEASE_MANY`]: super::RELEASE_MANY
/// [`LEAVE_QUEUE`]: super::LEAVE_QUEUE
/// [`ACQUIRE_HANDED`]: super::ACQUIRE_HANDED
/// [`ACQUIRE_ALL`]: super::ACQUIRE_ALL
/// [`ACQUIRE_PERMIT`]: super::ACQUIRE_PERMIT
/// [`ACQUIRE_READ`]: super::ACQUIRE_READ
macro_rules! grant_prelude {
    () => {
        r#"
local function wake(chan, msg, sharded)
  if sharded then
    redis.call('SPUBLISH', chan, msg)
  else
    redis.call('PUBLISH', chan, msg)
  end
end
local function enqueue(q, ids, value, ticket, id, ms, life)
  redis.call('ZADD', q, ticket, value)
  if tonumber(life or '0') > 0 then
    id = string.format('%d', permit_now() + tonumber(life)) .. ' ' .. id
  end
  redis.call('HSET', ids, value, id)
  local keep = math.max(ms, 0) + math.max(tonumber(ticket) % 1024, 1)
  for _, key in ipairs({q, ids}) do
    if redis.call('PTTL', key) < keep then
      redis.call('PEXPIRE', key, keep)
    end
  end
end
local function head(q, ids, below, now)
  while true do
    local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    if not first[1] or (below and tonumber(first[2]) >= below) then
      return nil, nil
    end
    local id = redis.call('HGET', ids, first[1])
    local at, rest = string.match(id or '', '^(%d+) (.*)$')
    if not at then
      return first, id or nil
    end
    if tonumber(at) > now() then
      return first, rest
    end
    redis.call('ZREM', q, first[1])
    redis.call('HDEL', ids, first[1])
  end
end
local function sweep(q, ids, holds)
  local gone, any = {}, false
  for _, v in ipairs(redis.call('HKEYS', ids)) do
    if not redis.call('ZSCORE', q, v) and not (holds and holds(v)) then
      gone[string.match(v, '^(.*):') or v], any = true, true
      redis.call('HDEL', ids, v)
    end
  end
  if any then
    for _, v in ipairs(redis.call('ZRANGE', q, 0, -1)) do
      if gone[string.match(v, '^(.*):') or v] then
        redis.call('ZREM', q, v)
        redis.call('HDEL', ids, v)
      end
    end
  end
end
local function grant(chan, q, ids, first, id, sharded)
  redis.call('ZREM', q, first[1])
  if id then
    if string.sub(id, 1, 2) == 'r:' then
      id = string.sub(id, 3)
    end
    wake(chan, first[1] .. ' ' .. id, sharded)
  else
    wake(chan, first[1], sharded)
  end
  return math.max(tonumber(first[2]) % 1024, 1)
end
local writer_lapse = 2000
local function writer_waits(lapses, first, now)
  if not lapses then
    return true
  end
  local at = redis.call('ZSCORE', lapses, first[1])
  if at and tonumber(at) <= now then
    return false
  end
  if not at then
    redis.call('ZADD', lapses, string.format('%d', now + writer_lapse), first[1])
    redis.call('PEXPIRE', lapses, 2 * writer_lapse)
  end
  return true
end
local function turn_over(lock, chan, q, ids, held, below, sharded, lapses)
  local now, out = nil, nil
  local function clock()
    now = now or permit_now()
    return now
  end
  local function readers_inside()
    redis.call('ZREMRANGEBYSCORE', lock, 0, clock())
    return redis.call('ZCARD', lock) > 1
  end
  if not held and below then
    local first = head(q, ids, below, clock)
    if first then
      sweep(q, ids, nil)
    end
  end
  while true do
    local first, id = head(q, ids, below, clock)
    if not first then
      break
    end
    if id and string.sub(id, 1, 2) == 'r:' then
      if held == 'string' then
        redis.call('DEL', lock)
      end
      held, out = 'zset', 'readers'
      local window = grant(chan, q, ids, first, id, sharded)
      redis.call('ZADD', lock, '-1', 'd2:readers')
      redis.call('ZADD', lock, 'NX', string.format('%d', clock() + window), first[1])
    elseif held == 'zset' and readers_inside() then
      if writer_waits(lapses, first, clock()) then
        permit_settle(lock, now)
        return 'writer'
      end
      redis.call('ZREM', q, first[1])
      redis.call('HDEL', ids, first[1])
      redis.call('ZREM', lapses, first[1])
    else
      if held == 'zset' then
        redis.call('DEL', lock)
      end
      local window = grant(chan, q, ids, first, id, sharded)
      redis.call('SET', lock, first[1] .. '+', 'PX', string.format('%d', window))
      return 'handed'
    end
  end
  if held == 'zset' and now then
    permit_settle(lock, now)
  end
  return out
end
local function let_go(lock, chan, q, ids, sharded)
  if q and turn_over(lock, chan, q, ids, 'string', nil, sharded, nil) then
    return
  end
  redis.call('DEL', lock)
  wake(chan, '1', sharded)
end
local function release_lock(lock, chan, q, ids, raw, value, keep, nv, nt, nid, nl, sharded)
  local v = unmark(raw)
  if v and v ~= value and string.sub(v, 1, 3) ~= 'd2:' then
    return -3
  end
  if nv and v ~= nv then
    enqueue(q, ids, nv, nt, nid, redis.call('PTTL', lock), nl)
  end
  local code = 0
  if v == false then
    code = -2
  elseif v ~= value then
    code = -1
    if nv and v ~= nv then
      mark(lock, raw)
    end
  elseif tonumber(keep) > 0 then
    redis.call('PEXPIRE', lock, keep)
  end
  if unwaited(raw, value, keep, q, nv) then
    redis.call('DEL', lock)
    return code
  end
  if q then
    redis.call('HDEL', ids, value)
  end
  if (code == 0 and tonumber(keep) <= 0) or (code == -2 and nv) then
    let_go(lock, chan, q, ids, sharded)
  end
  return code
end
"#
    };
}

/// A permit or a read hold let go, and a freed permit handed over, shared by
/// [`ACQUIRE_PERMIT`], [`RELEASE`], [`RELEASE_MANY`] and [`LEAVE_QUEUE`] (after
/// `holders_prelude!`, `permit_prelude!` and `grant_prelude!`, whose functions it uses).
///
/// `permit_hand`: with the semaphore's queue given (one server, Sentinel, a cluster), every free
/// permit of the semaphore `key` of `n` (expired holders already removed) is handed to the
/// waiters queued for it in their order (those with a ticket below `below`, if given: an
/// acquire hands the permits to the waiters ahead of it): each becomes a holder for its grant
/// window (read from its ticket, as a lock's), and the message names it and the request that
/// queued it (`grant`). The new holder trusts it for that window, or confirms it with one more
/// attempt, which finds it its own and extends it to the ttl (see [`ACQUIRE_PERMIT`]). Returns
/// the permits still free and how many were handed. A handed member never replaces a live one
/// (`NX`). An acquire (`below` given) that finds a permit free with a waiter queued ahead of it
/// sweeps first (`sweep`, `grant_prelude!`: a permit free while waiters are queued lapsed in a
/// holder's hands).
///
/// `permit_release`: a permit's or a read hold's release (`keep` ms > 0: kept for `min_hold`
/// instead): -3 not a `d2` set of holders, -2 not held (nothing changed), 1 kept, 0 let go.
/// With the queue given, its own `queue:ids` field (a grant's record, see `sweep`) is taken out.
/// With the queue given, a permit let go is handed to the first waiter queued for it
/// (`permit_hand`), and a read hold let go turns the lock over to the waiters queued for it
/// (`turn_over`: a writer once no reader is left); a release that hands nothing over (or
/// leaves permits free) sends the release channel `1`, a wake.
///
/// [`ACQUIRE_PERMIT`]: super::ACQUIRE_PERMIT
/// [`RELEASE`]: super::RELEASE
/// [`RELEASE_MANY`]: super::RELEASE_MANY
/// [`LEAVE_QUEUE`]: super::LEAVE_QUEUE
macro_rules! permit_handoff_prelude {
    () => {
        r#"
local function permit_hand(key, chan, q, ids, now, n, below, sharded)
  local held = redis.call('ZCARD', key)
  if held > 0 then
    held = held - 1
  end
  local free, handed = n - held, 0
  local function clock()
    return now
  end
  if below and free > 0 and head(q, ids, below, clock) then
    sweep(q, ids, function(v)
      return redis.call('ZSCORE', key, v)
    end)
  end
  while free > 0 do
    local first, id = head(q, ids, below, clock)
    if not first then
      break
    end
    local window = grant(chan, q, ids, first, id, sharded)
    redis.call('ZADD', key, string.format('%d', -n), 'd2:permits')
    redis.call('ZADD', key, 'NX', string.format('%d', now + window), first[1])
    free, handed = free - 1, handed + 1
  end
  return free, handed
end
local function permit_release(key, value, keep, chan, q, ids, sharded)
  if redis.call('TYPE', key)['ok'] ~= 'zset' then
    return -3
  end
  local n = redis.call('ZSCORE', key, 'd2:permits')
  if not n and not redis.call('ZSCORE', key, 'd2:readers') then
    return -3
  end
  local now = permit_now()
  redis.call('ZREMRANGEBYSCORE', key, 0, now)
  local code = -2
  if q then
    redis.call('HDEL', ids, value)
  end
  if redis.call('ZSCORE', key, value) then
    if tonumber(keep) > 0 then
      redis.call('ZADD', key, 'XX', string.format('%d', now + tonumber(keep)), value)
      code = 1
    else
      redis.call('ZREM', key, value)
      code = 0
    end
  end
  if code == 0 then
    local woken = false
    if n and q then
      local free, handed = permit_hand(key, chan, q, ids, now, -tonumber(n), nil, sharded)
      woken = handed > 0 and free == 0
    elseif q then
      local turned = turn_over(key, chan, q, ids, 'zset', nil, sharded, nil)
      if turned == 'handed' then
        return code
      end
      woken = turned == 'readers'
    end
    if not woken then
      wake(chan, '1', sharded)
    end
  end
  permit_settle(key, now)
  return code
end
"#
    };
}

/// The fence raise shared by `ACQUIRE_FENCED`, `ACQUIRE_PERMIT`, `ACQUIRE_READ` and
/// `ACQUIRE_HANDED` (a macro, so that `concat!` makes each script one constant string): with a
/// retention above 0, the token is the server's time in µs, or one above the fence key's last token
/// if that is not below it, and the key keeps it for the retention; a key that does not hold a
/// number is left as it was and reported (`bad`; `fence_error` is the script's error for it).
/// A retention of 0: no token (0).
macro_rules! fence_prelude {
    () => {
        r#"
local function fence_error(key, what)
  return redis.error_reply('ERR distlock: the fence key ' .. key .. ' does not hold a number; delete it to use this ' .. what)
end
local function fence_raise(key, retention)
  if tonumber(retention) <= 0 then
    return 0, false
  end
  local t = redis.call('TIME')
  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local prev = redis.call('SET', key, string.format('%d', token), 'PX', retention, 'GET')
  local last = tonumber(prev or '0')
  if last == nil then
    redis.call('SET', key, prev, 'PX', retention)
    return 0, true
  end
  if token <= last then
    token = last + 1
    redis.call('SET', key, string.format('%d', token), 'PX', retention)
  end
  return token, false
end
"#
    };
}
