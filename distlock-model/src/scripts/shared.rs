//! The holds several holders share (`shared.rs`): a permit, a read hold, and the write that
//! met readers.

use crate::keyspace::{lua_number, Bound, Redis, ZAdd};

use super::lock::fence_error;
use super::preludes::{
    enqueue, fence_raise, mark, num, permit_count, permit_hand, permit_now, permit_settle,
    turn_over, unmark, Line, Turned, PERMITS, READERS,
};
use super::{with_id, Args, Mutations, Reply};

fn int2(a: i64, b: i64) -> Vec<Reply> {
    vec![Reply::Int(a), Reply::Int(b)]
}

/// `ACQUIRE_PERMIT`.
pub(super) fn acquire_permit(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (key, value, id) = (a.k(1), a.a(1), a.a(5));
    let now = permit_now(r);
    let want = num(a.a(3));
    let turn = a.key(3).is_some();
    let mut held = 0;
    if r.exists(key) {
        let Some(n) = permit_count(r, key) else {
            return with_id(id, int2(2, 0));
        };
        r.zremrangebyscore(key, Bound::Incl(0), Bound::Incl(now));
        held = r.zcard(key) - 1;
        if held > 0 && n != want {
            return with_id(id, int2(3, n));
        }
        if r.zscore(key, value).is_some() {
            held = -1;
        }
    }
    let mut free = want - held + i64::from(m.permit_off_by_one);
    if held >= 0 && turn && !m.permit_skips_queue {
        let line = Line {
            q: a.k(3),
            ids: a.k(5),
            chan: a.k(4),
        };
        free = permit_hand(r, m, key, line, now, want, Some(num(a.a(6)))).0;
    }
    if held >= 0 && free <= 0 {
        let first = r.zrange(key, 1, 1).first().map_or(0, |(_, s)| *s);
        let ms = (first - now).max(1);
        if turn {
            permit_settle(r, key, now);
            let pttl = r.pttl(key);
            enqueue(r, m, a.k(3), a.k(5), value, a.a(6), id, pttl, a.arg(8));
        }
        return with_id(id, int2(0, ms));
    }
    let (token, bad) = fence_raise(r, m, a.k(2), a.a(4));
    if bad {
        return fence_error(a.k(2), "semaphore");
    }
    if turn {
        r.zrem(a.k(3), value);
        r.hdel(a.k(5), value);
    }
    r.zadd(key, -want, PERMITS, ZAdd::Any);
    r.zadd(key, now + num(a.a(2)), value, ZAdd::Gt);
    permit_settle(r, key, now);
    with_id(id, int2(1, token))
}

/// `ACQUIRE_READ`.
pub(super) fn acquire_read(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (key, value, id) = (a.k(1), a.a(1), a.a(4));
    let now = permit_now(r);
    let turn = a.key(4).is_some();
    let ticket = num(a.arg(5).unwrap_or("0"));
    let busy = |r: &mut Redis, ms: i64| {
        if ticket > 0 {
            let pttl = r.pttl(key);
            let rid = format!("r:{id}");
            enqueue(r, m, a.k(4), a.k(6), value, a.a(5), &rid, pttl, a.arg(7));
        }
        with_id(id, int2(0, ms))
    };
    let kind = r.type_of(key);
    let mut replay = false;
    match kind {
        "string" => {
            let v = r.get(key).ok().flatten().unwrap_or_default();
            if !v.starts_with("d2:") {
                return with_id(id, int2(2, 0));
            }
            if ticket > 0 && !m.reader_writes_no_mark {
                mark(r, key, &v);
            }
            let pttl = r.pttl(key);
            return busy(r, pttl);
        }
        "zset" => {
            if r.zscore(key, READERS).is_none() {
                return with_id(id, int2(2, 0));
            }
            r.zremrangebyscore(key, Bound::Incl(0), Bound::Incl(now));
            replay = r.zscore(key, value).is_some();
        }
        "none" => {}
        _ => return with_id(id, int2(2, 0)),
    }
    if !replay && turn {
        let held = (kind == "zset").then_some("zset");
        let below = (ticket > 0).then_some(ticket);
        let line = Line {
            q: a.k(4),
            ids: a.k(6),
            chan: a.k(5),
        };
        let turned = turn_over(r, m, key, line, held, below, a.key(7));
        let blocked = match turned {
            Some(Turned::Handed) => true,
            Some(Turned::Writer) => !m.reader_passes_writer,
            _ => false,
        };
        if blocked {
            let pttl = r.pttl(key).max(1);
            return busy(r, pttl);
        }
    }
    if !replay {
        let mut intent = r.pttl(a.k(3));
        if intent != -2 {
            if r.type_of(key) == "zset" {
                permit_settle(r, key, now);
            }
            if intent < 0 {
                intent = 1000;
            }
            return busy(r, intent);
        }
    }
    let (token, bad) = fence_raise(r, m, a.k(2), a.a(3));
    if bad {
        return fence_error(a.k(2), "lock");
    }
    if ticket > 0 {
        r.zrem(a.k(4), value);
        r.hdel(a.k(6), value);
    }
    r.zadd(key, -1, READERS, ZAdd::Any);
    r.zadd(key, now + num(a.a(2)), value, ZAdd::Gt);
    permit_settle(r, key, now);
    with_id(id, int2(1, token))
}

/// `ACQUIRE_WRITE`.
pub(super) fn acquire_write(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (key, value, id) = (a.k(1), a.a(1), a.a(4));
    let now = permit_now(r);
    let intent = num(a.a(5));
    let busy = |r: &mut Redis, mut ms: i64| {
        if intent > 0 {
            r.set(a.k(3), value, Some(intent));
            ms = ms.min((intent / 3).max(1));
        }
        with_id(id, int2(0, ms))
    };
    match r.type_of(key) {
        "zset" => {
            if r.zscore(key, READERS).is_none() {
                return with_id(id, int2(2, 0));
            }
            r.zremrangebyscore(key, Bound::Incl(0), Bound::Incl(now));
            if let Some((_, first)) = r.zrange(key, 1, 1).into_iter().next() {
                let last = r.zrange(key, -1, -1).first().map_or(0, |(_, s)| *s);
                r.pexpire(key, last - now);
                return busy(r, (first - now).max(1));
            }
            r.del(key);
        }
        "string" => {
            let raw = r.get(key).ok().flatten().unwrap_or_default();
            let v = unmark(Some(raw.clone())).unwrap_or_default();
            if v == value {
                let mut token = 0;
                if num(a.a(3)) > 0 {
                    let floor = r.get(a.k(2)).ok().flatten();
                    token = lua_number(floor.as_deref().unwrap_or("0")).unwrap_or(0);
                }
                return with_id(id, int2(1, token));
            }
            if !v.starts_with("d2:") {
                return with_id(id, int2(2, 0));
            }
            let mut pttl = r.pttl(key);
            if pttl < 0 {
                pttl = 1000;
            }
            if intent > 0 {
                mark(r, key, &raw);
            }
            return busy(r, pttl);
        }
        "none" => {}
        _ => return with_id(id, int2(2, 0)),
    }
    let (token, bad) = fence_raise(r, m, a.k(2), a.a(3));
    if bad {
        return fence_error(a.k(2), "lock");
    }
    r.set(key, value, Some(num(a.a(2))));
    if r.get(a.k(3)).ok().flatten().as_deref() == Some(value) {
        r.del(a.k(3));
    }
    with_id(id, int2(1, token))
}
