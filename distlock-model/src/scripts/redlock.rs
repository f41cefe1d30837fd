//! RedLock's scripts (`redlock.rs`): the queued acquire and the fence floor.

use crate::keyspace::{lua_number, Bound, Redis, ZAdd};

use super::preludes::{num, permit_now, unmark};
use super::{with_id, Args, Mutations, Reply};

fn floor_error(key: &str) -> Reply {
    Reply::Error(format!(
        "ERR distlock: the fence key {key} does not hold a number; delete it to use this lock"
    ))
}

fn int3(a: i64, b: i64, c: i64) -> Vec<Reply> {
    vec![Reply::Int(a), Reply::Int(b), Reply::Int(c)]
}

/// `ACQUIRE_QUEUED`.
pub(super) fn acquire_queued(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (lock, fence, q, until) = (a.k(1), a.k(2), a.k(3), a.k(4));
    let (value, id) = (a.a(1), a.a(4));
    let now = permit_now(r);
    let lapsed = r.zrangebyscore(until, Bound::NegInf, Bound::Incl(now));
    if !lapsed.is_empty() {
        for member in &lapsed {
            r.zrem(q, member);
        }
        r.zremrangebyscore(until, Bound::NegInf, Bound::Incl(now));
    }
    let v = match r.get(lock).map(unmark) {
        Err(_) => return with_id(id, int3(2, 0, 0)),
        Ok(v) => v,
    };
    let ticket = num(a.a(5));
    let grace = num(a.a(6));
    let queue = |r: &mut Redis, ms: i64| {
        if ticket > 0 && a.a(7) == "1" {
            let mut lapse = now + ms + grace;
            let life = num(a.arg(8).unwrap_or("0"));
            if life > 0 {
                lapse = lapse.min(now + life);
            }
            r.zadd(q, ticket, value, ZAdd::Any);
            r.zadd(until, lapse, value, ZAdd::Any);
            let last = r.zrange(until, -1, -1).first().map_or(0, |(_, s)| *s);
            let keep = (last - now).max(1);
            r.pexpire(q, keep);
            r.pexpire(until, keep);
        }
    };
    let fence_token = |r: &mut Redis, replay: bool| -> Option<i64> {
        if num(a.a(3)) == 0 {
            return Some(0);
        }
        if replay {
            let floor = r.get(fence).ok().flatten();
            return Some(lua_number(floor.as_deref().unwrap_or("0")).unwrap_or(0));
        }
        let (s, us) = r.time();
        let mut token = s * 1_000_000 + us;
        let retention = Some(num(a.a(3)));
        let prev = r
            .set_get(fence, &token.to_string(), retention)
            .unwrap_or_default();
        let Some(floor) = lua_number(prev.as_deref().unwrap_or("0")) else {
            r.set(fence, prev.as_deref().unwrap_or(""), retention);
            return None;
        };
        if token <= floor && !m.token_from_clock_only {
            token = floor + 1;
            r.set(fence, &token.to_string(), retention);
        }
        Some(token)
    };
    if v.as_deref() == Some(value) {
        r.zrem(q, value);
        r.zrem(until, value);
        let token = fence_token(r, true).unwrap_or(0);
        return with_id(id, int3(1, token, 0));
    }
    if let Some(v) = v {
        if !v.starts_with("d2:") {
            return with_id(id, int3(2, 0, 0));
        }
        let pttl = r.pttl(lock);
        queue(r, if pttl >= 0 { pttl } else { 1000 });
        let before = if ticket > 0 {
            r.zcount(q, Bound::NegInf, Bound::Excl(ticket))
        } else {
            0
        };
        return with_id(id, int3(0, pttl, before));
    }
    let ahead = if ticket > 0 {
        r.zrangebyscore(q, Bound::NegInf, Bound::Excl(ticket))
    } else {
        r.zrange(q, 0, -1).into_iter().map(|(m, _)| m).collect()
    };
    if !ahead.is_empty() {
        for member in &ahead {
            r.zadd(until, now + grace, member, ZAdd::Lt);
        }
        let left = (r.zscore(until, &ahead[0]).unwrap_or(0) - now).max(1);
        queue(r, left);
        return with_id(id, int3(3, left, ahead.len() as i64));
    }
    let Some(token) = fence_token(r, false) else {
        return floor_error(fence);
    };
    r.zrem(q, value);
    r.zrem(until, value);
    r.set(lock, value, Some(num(a.a(2))));
    with_id(id, int3(1, token, 0))
}

/// `FENCE_FLOOR`.
pub(super) fn fence_floor(r: &mut Redis, a: &Args) -> Reply {
    let key = a.k(1);
    let got = r.get(key).ok().flatten();
    let Some(f) = lua_number(got.as_deref().unwrap_or("0")) else {
        return floor_error(key);
    };
    let to = num(a.a(2));
    if to > f {
        r.set(key, &to.to_string(), Some(num(a.a(3))));
    }
    Reply::Array(vec![super::bulk(a.a(1)), Reply::Int(f)])
}
