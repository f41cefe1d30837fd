//! The Lua functions several scripts share (`distlock-core/src/wire/scripts/preludes.rs`),
//! function for function, over the modelled keyspace.

use crate::keyspace::{lua_number, Bound, Redis, ZAdd};

use super::Mutations;

/// The mark of a semaphore's set of holders (score `-n`).
pub const PERMITS: &str = "d2:permits";
/// The mark of a set of readers (score `-1`).
pub const READERS: &str = "d2:readers";
/// How long a writer at the head of the line behind readers waits without asking again.
pub const WRITER_LAPSE: i64 = 2000;

/// `permit_now`: the server's clock in ms.
pub(super) fn permit_now(r: &Redis) -> i64 {
    let (s, us) = r.time();
    s * 1000 + us / 1000
}

/// `permit_settle`: the key's expiry at its latest deadline, or the key deleted.
pub(super) fn permit_settle(r: &mut Redis, key: &str, now: i64) {
    let at = r.zrange(key, -1, -1).first().map_or(0, |(_, s)| *s);
    if at <= now {
        r.del(key);
    } else {
        r.pexpire(key, at - now);
    }
}

/// `permit_count`: a semaphore's `n`.
pub(super) fn permit_count(r: &mut Redis, key: &str) -> Option<i64> {
    if r.type_of(key) != "zset" {
        return None;
    }
    r.zscore(key, PERMITS).map(|n| -n)
}

/// `permit_set`: a `d2` set of holders (permits or readers).
pub(super) fn permit_set(r: &mut Redis, key: &str) -> bool {
    if r.type_of(key) != "zset" {
        return false;
    }
    r.zscore(key, PERMITS).is_some() || r.zscore(key, READERS).is_some()
}

/// `permit_renew`: -2 not a set of holders, 1 renewed (only extends), 0 not a holder.
pub(super) fn permit_renew(r: &mut Redis, key: &str, value: &str, ttl: &str) -> i64 {
    if !permit_set(r, key) {
        return -2;
    }
    let now = permit_now(r);
    r.zremrangebyscore(key, Bound::Incl(0), Bound::Incl(now));
    let s = r.zscore(key, value);
    if s.is_some() {
        r.zadd(key, now + num(ttl), value, ZAdd::Gt);
    }
    permit_settle(r, key, now);
    i64::from(s.is_some())
}

/// `unmark`: a lock's value without its waiters' mark (`+`: a lock someone waits for holds
/// `d2:<owner>+`, see `marks_prelude!`); nothing stays nothing.
pub(super) fn unmark(v: Option<String>) -> Option<String> {
    v.map(|s| match s.strip_suffix('+') {
        Some(unmarked) => unmarked.to_owned(),
        None => s,
    })
}

/// `mark`: a lock held with the value `raw` (as read) marked, its expiry kept.
pub(super) fn mark(r: &mut Redis, lock: &str, raw: &str) {
    if !raw.ends_with('+') {
        r.set_keepttl(lock, &format!("{raw}+"));
    }
}

/// `unwaited`: a release (of `value`, keep ms `keep`) that finds the lock holding `raw` is one
/// nobody waits for: the owner's lock, unmarked, let go now, with the queue given and no next
/// waiter carried. (`release_ignores_marks` seeds the bug of reading it through `unmark`.)
pub(super) fn unwaited(
    f: &Mutations,
    raw: Option<&str>,
    value: &str,
    keep: &str,
    queue: bool,
    next: bool,
) -> bool {
    let own = match raw {
        Some(raw) if f.release_ignores_marks => raw.strip_suffix('+').unwrap_or(raw) == value,
        raw => raw == Some(value),
    };
    own && queue && !next && num(keep) <= 0
}

/// `wake`.
pub(super) fn wake(r: &mut Redis, chan: &str, msg: &str) {
    r.publish(chan, msg);
}

/// `entry`: a queue entry's record in `queue:ids` read as its lapse (server ms) and its
/// request id (`"<lapse> <id>"`; a record without the `<digits> ` prefix never lapses).
pub(super) fn entry(raw: Option<String>) -> (Option<i64>, Option<String>) {
    let Some(raw) = raw else { return (None, None) };
    if let Some((at, id)) = raw.split_once(' ') {
        if !at.is_empty() && at.bytes().all(|b| b.is_ascii_digit()) {
            return (lua_number(at), Some(id.to_owned()));
        }
    }
    (None, Some(raw))
}

/// `client_of`: a lock value's client (up to its last `:`; the Lua's `sweep` reads it in
/// place).
pub(super) fn client_of(v: &str) -> &str {
    v.rfind(':').map_or(v, |at| &v[..at])
}

/// `enqueue` (`life`: the entry's life in ms, recorded as its lapse when above 0; the
/// mutation `entry_without_lapse` never records it).
#[allow(clippy::too_many_arguments)]
pub(super) fn enqueue(
    r: &mut Redis,
    f: &Mutations,
    q: &str,
    ids: &str,
    value: &str,
    ticket: &str,
    id: &str,
    ms: i64,
    life: Option<&str>,
) {
    r.zadd(q, num(ticket), value, ZAdd::Any);
    let life = num(life.unwrap_or("0"));
    if life > 0 && !f.entry_without_lapse {
        let at = permit_now(r) + life;
        r.hset(ids, value, &format!("{at} {id}"));
    } else {
        r.hset(ids, value, id);
    }
    let keep = ms.max(0) + num(ticket).rem_euclid(1024).max(1);
    for key in [q, ids] {
        if r.pttl(key) < keep {
            r.pexpire(key, keep);
        }
    }
}

/// `head` (the Lua reads each record as `entry` does, in place): the first entry of the queue
/// (with a ticket below `below`, if given) whose lapse has not passed, and its request id; the
/// lapsed entries met on the way are removed. `now` is the caller's clock, read (`permit_now`)
/// only when an entry has a lapse.
pub(super) fn head(
    r: &mut Redis,
    (q, ids): (&str, &str),
    below: Option<i64>,
    now: &mut Option<i64>,
) -> Option<((String, i64), Option<String>)> {
    loop {
        let first = r.zrange(q, 0, 0).into_iter().next()?;
        if below.is_some_and(|b| first.1 >= b) {
            return None;
        }
        let (at, id) = entry(r.hget(ids, &first.0));
        let lapsed = at.is_some_and(|at| at <= *now.get_or_insert_with(|| permit_now(r)));
        if !lapsed {
            return Some((first, id));
        }
        r.zrem(q, &first.0);
        r.hdel(ids, &first.0);
    }
}

/// `sweep`: every record in `queue:ids` neither queued nor holding (`holds`: a member of a
/// semaphore's set; none for a lock found free) is a grantee whose hold lapsed: its client is
/// taken for gone, its record removed, and every queued entry of that client removed. (The
/// mutation `no_sweep` skips it.)
pub(super) fn sweep(r: &mut Redis, f: &Mutations, (q, ids): (&str, &str), holds: Option<&str>) {
    if f.no_sweep {
        return;
    }
    let mut gone = std::collections::BTreeSet::new();
    for (v, _) in r.hgetall(ids) {
        let held = holds.is_some_and(|key| r.zscore(key, &v).is_some());
        if r.zscore(q, &v).is_none() && !held {
            gone.insert(client_of(&v).to_owned());
            r.hdel(ids, &v);
        }
    }
    if !gone.is_empty() {
        for (v, _) in r.zrange(q, 0, -1) {
            if gone.contains(client_of(&v)) {
                r.zrem(q, &v);
                r.hdel(ids, &v);
            }
        }
    }
}

/// `grant`: the first waiter's entry out of the queue (its record in `queue:ids` stays: the
/// record of a grant until its holder lets go, see `sweep`), the message naming it; its grant
/// window.
pub(super) fn grant(
    r: &mut Redis,
    f: &Mutations,
    chan: &str,
    q: &str,
    first: &(String, i64),
    id: Option<String>,
) -> i64 {
    r.zrem(q, &first.0);
    match id {
        Some(id) => {
            let id = id.strip_prefix("r:").unwrap_or(&id);
            wake(r, chan, &format!("{} {id}", first.0));
        }
        None => wake(r, chan, &first.0),
    }
    if f.grant_for_ttl > 0 {
        return f.grant_for_ttl;
    }
    first.1.rem_euclid(1024).max(1)
}

/// `writer_waits`.
fn writer_waits(r: &mut Redis, lapses: Option<&str>, first: &str, now: i64) -> bool {
    let Some(lapses) = lapses else { return true };
    let at = r.zscore(lapses, first);
    if at.is_some_and(|at| at <= now) {
        return false;
    }
    if at.is_none() {
        r.zadd(lapses, now + WRITER_LAPSE, first, ZAdd::Any);
        r.pexpire(lapses, 2 * WRITER_LAPSE);
    }
    true
}

/// What `turn_over` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turned {
    /// Readers at the head were handed a share each.
    Readers,
    /// A writer was handed the lock.
    Handed,
    /// A writer at the head waits for the readers inside.
    Writer,
}

/// The queue keys of a lock: the queue, its request ids, the release channel.
#[derive(Clone, Copy)]
pub(super) struct Line<'k> {
    /// `prefix:{name}:queue`.
    pub(super) q: &'k str,
    /// `prefix:{name}:queue:ids`.
    pub(super) ids: &'k str,
    /// The release channel.
    pub(super) chan: &'k str,
}

/// `turn_over`: `held` is `Some("string")`, `Some("zset")` or `None` (free). A lock found free
/// by an attempt (`below` given) with someone queued ahead is swept first (`sweep`).
pub(super) fn turn_over(
    r: &mut Redis,
    f: &Mutations,
    lock: &str,
    line: Line,
    mut held: Option<&'static str>,
    below: Option<i64>,
    lapses: Option<&str>,
) -> Option<Turned> {
    let mut now: Option<i64> = None;
    let mut out = None;
    let queue = (line.q, line.ids);
    if held.is_none() && below.is_some() && head(r, queue, below, &mut now).is_some() {
        sweep(r, f, queue, None);
    }
    while let Some((first, id)) = head(r, queue, below, &mut now) {
        if id.as_deref().is_some_and(|i| i.starts_with("r:")) {
            if held == Some("string") {
                r.del(lock);
            }
            held = Some("zset");
            out = Some(Turned::Readers);
            let window = grant(r, f, line.chan, line.q, &first, id);
            r.zadd(lock, -1, READERS, ZAdd::Any);
            let t = *now.get_or_insert_with(|| permit_now(r));
            r.zadd(lock, t + window, &first.0, ZAdd::Nx);
        } else if held == Some("zset") && !f.writer_ignores_readers && {
            let t = *now.get_or_insert_with(|| permit_now(r));
            r.zremrangebyscore(lock, Bound::Incl(0), Bound::Incl(t));
            r.zcard(lock) > 1
        } {
            let t = now.unwrap_or_default();
            if writer_waits(r, lapses, &first.0, t) {
                permit_settle(r, lock, t);
                return Some(Turned::Writer);
            }
            r.zrem(line.q, &first.0);
            r.hdel(line.ids, &first.0);
            if let Some(lapses) = lapses {
                r.zrem(lapses, &first.0);
            }
        } else {
            if held == Some("zset") {
                r.del(lock);
            }
            let window = grant(r, f, line.chan, line.q, &first, id);
            // The lock handed over is set marked (others may wait behind); the mutation
            // `grant_writes_no_mark` sets it unmarked.
            let mark = if f.grant_writes_no_mark { "" } else { "+" };
            r.set(lock, &format!("{}{mark}", first.0), Some(window));
            return Some(Turned::Handed);
        }
    }
    if let (Some("zset"), Some(t)) = (held, now) {
        permit_settle(r, lock, t);
    }
    out
}

/// `let_go`: handed over (with the queue; the lock set marked, `turn_over`) or deleted and
/// woken.
pub(super) fn let_go(
    r: &mut Redis,
    f: &Mutations,
    lock: &str,
    chan: &str,
    queue: Option<(&str, &str)>,
) {
    if let Some((q, ids)) = queue.filter(|_| !f.let_go_without_handoff) {
        let line = Line { q, ids, chan };
        if turn_over(r, f, lock, line, Some("string"), None, None).is_some() {
            return;
        }
    }
    r.del(lock);
    wake(r, chan, "1");
}

/// A releasing client's next waiter (`nv`, `nt`, `nid`, `nl`).
pub(super) struct Next<'a> {
    /// Its lock value.
    pub(super) value: &'a str,
    /// Its ticket.
    pub(super) ticket: &'a str,
    /// The request id its grant will name.
    pub(super) id: &'a str,
    /// Its entry's life (ms; `None`: not sent).
    pub(super) life: Option<&'a str>,
}

/// `release_lock`: -3 not a `d2` lock, -2 no lock, -1 another's, 0 released (`raw`: the
/// lock's value as read, marked or not; every comparison reads it through `unmark`). A
/// release nobody waits for (`unwaited`) deletes the lock and nothing more (no queue read, no
/// message); any other lets it go (`let_go`: handed to the first waiter, or deleted and woken).
/// A release that lets go (code 0) removes its own record from `queue:ids` (but not one
/// nobody waits for); a carried next waiter queued behind another's lock marks it.
#[allow(clippy::too_many_arguments)]
pub(super) fn release_lock(
    r: &mut Redis,
    f: &Mutations,
    lock: &str,
    chan: &str,
    queue: Option<(&str, &str)>,
    raw: Option<String>,
    value: &str,
    keep: &str,
    next: Option<Next>,
) -> i64 {
    let v = unmark(raw.clone());
    if let Some(v) = &v {
        if v != value && !v.starts_with("d2:") {
            return -3;
        }
    }
    let has_next = next.is_some();
    let carried = next.as_ref().is_some_and(|n| v.as_deref() != Some(n.value));
    if let (Some(n), Some((q, ids)), true) = (&next, queue, carried) {
        let pttl = r.pttl(lock);
        enqueue(r, f, q, ids, n.value, n.ticket, n.id, pttl, n.life);
    }
    let code = match &v {
        None => -2,
        Some(v) if v != value && !f.release_without_owner_check => {
            if let (true, Some(raw)) = (carried, &raw) {
                mark(r, lock, raw);
            }
            -1
        }
        Some(_) => {
            if num(keep) > 0 {
                r.pexpire(lock, num(keep));
            }
            0
        }
    };
    // Any release but the unwaited one ends its grant's record, whatever it finds.
    let own_record = |r: &mut Redis| {
        if let Some((_, ids)) = queue {
            r.hdel(ids, value);
        }
    };
    if unwaited(f, raw.as_deref(), value, keep, queue.is_some(), has_next) {
        r.del(lock);
    } else if (code == 0 && num(keep) <= 0) || (code == -2 && has_next) {
        own_record(r);
        let_go(r, f, lock, chan, queue);
    } else {
        own_record(r);
    }
    code
}

/// `permit_hand`: free permits handed to the waiters in order; (still free, handed). An
/// acquire's (`below` given) that finds permits free with someone queued ahead sweeps first
/// (`sweep`: a record neither queued nor a member of the set is a lapsed grantee's).
#[allow(clippy::too_many_arguments)]
pub(super) fn permit_hand(
    r: &mut Redis,
    f: &Mutations,
    key: &str,
    line: Line,
    now: i64,
    n: i64,
    below: Option<i64>,
) -> (i64, i64) {
    let mut held = r.zcard(key);
    if held > 0 {
        held -= 1;
    }
    let (mut free, mut handed) = (n - held, 0);
    let queue = (line.q, line.ids);
    let mut clock = Some(now);
    if below.is_some() && free > 0 && head(r, queue, below, &mut clock).is_some() {
        sweep(r, f, queue, Some(key));
    }
    while free > 0 {
        let Some((first, id)) = head(r, queue, below, &mut clock) else {
            break;
        };
        let window = grant(r, f, line.chan, line.q, &first, id);
        r.zadd(key, -n, PERMITS, ZAdd::Any);
        r.zadd(key, now + window, &first.0, ZAdd::Nx);
        free -= 1;
        handed += 1;
    }
    (free, handed)
}

/// `permit_release`: -3 not a set of holders, -2 not held, 1 kept, 0 let go.
pub(super) fn permit_release(
    r: &mut Redis,
    f: &Mutations,
    key: &str,
    value: &str,
    keep: &str,
    chan: &str,
    queue: Option<(&str, &str)>,
) -> i64 {
    if r.type_of(key) != "zset" {
        return -3;
    }
    let n = r.zscore(key, PERMITS);
    if n.is_none() && r.zscore(key, READERS).is_none() {
        return -3;
    }
    let now = permit_now(r);
    r.zremrangebyscore(key, Bound::Incl(0), Bound::Incl(now));
    let mut code = -2;
    if let Some((_, ids)) = queue {
        r.hdel(ids, value);
    }
    if r.zscore(key, value).is_some() {
        if num(keep) > 0 {
            r.zadd(key, now + num(keep), value, ZAdd::Xx);
            code = 1;
        } else {
            r.zrem(key, value);
            code = 0;
        }
    }
    if code == 0 {
        let mut woken = false;
        match (n, queue) {
            (Some(n), Some((q, ids))) => {
                let line = Line { q, ids, chan };
                let (free, handed) = permit_hand(r, f, key, line, now, -n, None);
                woken = handed > 0 && free == 0;
            }
            (None, Some((q, ids))) => {
                let line = Line { q, ids, chan };
                match turn_over(r, f, key, line, Some("zset"), None, None) {
                    Some(Turned::Handed) => return code,
                    turned => woken = turned == Some(Turned::Readers),
                }
            }
            _ => {}
        }
        if !woken {
            wake(r, chan, "1");
        }
    }
    permit_settle(r, key, now);
    code
}

/// `fence_raise`: the token (0 without retention) and whether the key held no number.
pub(super) fn fence_raise(r: &mut Redis, f: &Mutations, key: &str, retention: &str) -> (i64, bool) {
    if num(retention) <= 0 {
        return (0, false);
    }
    let (s, us) = r.time();
    let mut token = s * 1_000_000 + us;
    let prev = r
        .set_get(key, &token.to_string(), Some(num(retention)))
        .unwrap_or_default();
    let Some(last) = lua_number(prev.as_deref().unwrap_or("0")) else {
        r.set(key, prev.as_deref().unwrap_or(""), Some(num(retention)));
        return (0, true);
    };
    if token <= last && !f.token_from_clock_only {
        token = last + 1;
        r.set(key, &token.to_string(), Some(num(retention)));
    }
    (token, false)
}

/// `tonumber` of an argument the scripts read as a number (0 for none).
pub(super) fn num(s: &str) -> i64 {
    lua_number(s).unwrap_or(0)
}
