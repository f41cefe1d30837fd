//! A waiter's turn (`handoff.rs`): `ACQUIRE_HANDED` and `LEAVE_QUEUE`.

use crate::keyspace::{Bound, Redis, ZAdd};

use super::lock::fence_error;
use super::preludes::{
    enqueue, fence_raise, let_go, mark, num, permit_now, permit_release, permit_settle, turn_over,
    unmark, Line, Turned, WRITER_LAPSE,
};
use super::{bulk, with_id, Args, Mutations, Reply};

fn int2(a: i64, b: i64) -> Vec<Reply> {
    vec![Reply::Int(a), Reply::Int(b)]
}

/// `ACQUIRE_HANDED`.
pub(super) fn acquire_handed(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (lock, q, chan, ids, lapses) = (a.k(1), a.k(2), a.k(3), a.k(4), a.k(5));
    let (value, id) = (a.a(1), a.a(3));
    let confirm = a.arg(8).is_some();
    let token = |r: &mut Redis| -> Result<i64, Reply> {
        if !confirm {
            return Ok(0);
        }
        match fence_raise(r, m, a.k(6), a.a(8)) {
            (_, true) => Err(fence_error(a.k(6), "lock")),
            (t, false) => Ok(t),
        }
    };
    let queue = |r: &mut Redis, ms: i64| enqueue(r, m, q, ids, value, a.a(4), id, ms, a.arg(7));
    let raw = r.get(lock);
    let mut v = match raw.clone().map(unmark) {
        Ok(v) => v,
        Err(_) => {
            if r.type_of(lock) != "zset" || r.zscore(lock, super::READERS).is_none() {
                return with_id(id, int2(2, 0));
            }
            let now = permit_now(r);
            r.zremrangebyscore(lock, Bound::Incl(0), Bound::Incl(now));
            if let Some((_, first)) = r.zrange(lock, 1, 1).into_iter().next() {
                let ms = (first - now).clamp(1, WRITER_LAPSE / 4);
                permit_settle(r, lock, now);
                let pttl = r.pttl(lock).max(0);
                queue(r, pttl);
                r.zadd(lapses, now + WRITER_LAPSE, value, ZAdd::Any);
                if r.pttl(lapses) < 2 * WRITER_LAPSE {
                    r.pexpire(lapses, 2 * WRITER_LAPSE);
                }
                return with_id(id, int2(3, ms));
            }
            r.del(lock);
            None
        }
    };
    if v.as_deref() == Some(value) {
        r.zrem(q, value);
        r.hdel(ids, value);
        r.zrem(lapses, value);
        let pttl = r.pttl(lock);
        if confirm {
            r.pexpire(lock, pttl.max(num(a.a(2))));
            return match token(r) {
                Err(e) => e,
                Ok(t) => with_id(id, int2(1, t)),
            };
        }
        if pttl < num(a.a(2)) {
            r.pexpire(lock, num(a.a(2)));
        }
        return with_id(id, int2(1, 0));
    }
    if let Some(held) = v.take() {
        if !held.starts_with("d2:") {
            return with_id(id, int2(2, 0));
        }
        let pttl = r.pttl(lock);
        queue(r, pttl.max(0));
        if let (Ok(Some(raw)), false) = (&raw, m.handed_writes_no_mark) {
            mark(r, lock, raw);
        }
        return with_id(id, int2(0, pttl));
    }
    let turned = if m.skip_queue_check {
        None
    } else {
        let line = Line { q, ids, chan };
        turn_over(r, m, lock, line, None, Some(num(a.a(4))), None)
    };
    if let Some(turned) = turned {
        let pttl = r.pttl(lock).max(1);
        queue(r, pttl);
        let status = if turned == Turned::Readers { 3 } else { 0 };
        return with_id(id, int2(status, pttl));
    }
    let t = match token(r) {
        Err(e) => return e,
        Ok(t) => t,
    };
    r.zrem(q, value);
    r.hdel(ids, value);
    r.zrem(lapses, value);
    let value = if r.zcard(q) > 0 {
        format!("{value}+")
    } else {
        value.to_owned()
    };
    r.set(lock, &value, Some(num(a.a(2))));
    with_id(id, int2(1, t))
}

/// `LEAVE_QUEUE` (2 keys per lock: the queue and its lapses; 5: also the lock, its channel and
/// the request ids, where a release may have handed the lock to the waiter).
pub(super) fn leave_queue(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let per = num(a.a(4)).max(1) as usize;
    let value = a.a(1);
    let mut removed = 0;
    let mut at = 0;
    while per <= a.nkeys() && at <= a.nkeys() - per {
        let q = a.k(at + 1);
        r.zrem(a.k(at + 2), value);
        removed += r.zrem(q, value);
        if per >= 5 {
            let (lock, chan, ids) = (a.k(at + 3), a.k(at + 4), a.k(at + 5));
            r.hdel(ids, value);
            match r.get(lock).map(unmark) {
                Ok(Some(v)) if v == value => let_go(r, m, lock, chan, Some((q, ids))),
                Err(_) => {
                    permit_release(r, m, lock, value, "0", chan, Some((q, ids)));
                }
                _ => {}
            }
        }
        at += per;
    }
    Reply::Array(vec![bulk(a.a(2)), Reply::Int(removed)])
}
