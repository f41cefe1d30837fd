//! A set of locks taken together (`sets.rs`): `ACQUIRE_ALL`.

use crate::keyspace::{lua_number, Redis};

use super::lock::fence_error;
use super::preludes::{enqueue, fence_raise, let_go, mark, num, turn_over, unmark, Line, READERS};
use super::{with_id, Args, Mutations, Reply};

/// `ACQUIRE_ALL`.
pub(super) fn acquire_all(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let turn = a.arg(5).is_some();
    let per = if turn { 5 } else { 2 };
    let n = a.nkeys() / per;
    let (value, id) = (a.a(1), a.a(4));
    let key = |i: usize, j: usize| a.k(per * (i - 1) + j);
    let busy = |r: &mut Redis, i: usize, ms: i64, raw: Option<&str>| {
        if let (Some(raw), false) = (raw, m.set_writes_no_mark) {
            mark(r, key(i, 1), raw);
        }
        if turn {
            for j in 1..=n {
                let (q, ids) = (key(j, 3), key(j, 5));
                if j == i {
                    enqueue(r, m, q, ids, value, a.a(5), id, ms, a.arg(7));
                } else {
                    r.zrem(q, value);
                    r.hdel(ids, value);
                    if unmark(r.get(key(j, 1)).ok().flatten()).as_deref() == Some(value) {
                        let_go(r, m, key(j, 1), key(j, 4), Some((q, ids)));
                    }
                }
            }
        }
        with_id(
            id,
            vec![Reply::Int(0), Reply::Int(ms), Reply::Int(i as i64)],
        )
    };
    let refused = |i: usize| with_id(id, vec![Reply::Int(2), Reply::Int(0), Reply::Int(i as i64)]);
    let mut mine = 0;
    // The locks found ours and marked (Lua's `marked[i]`).
    let mut marked = std::collections::BTreeSet::new();
    for i in 1..=n {
        let lock = key(i, 1);
        if m.set_checks_first_only && i > 1 {
            break;
        }
        let raw = r.get(lock);
        match raw.clone().map(unmark) {
            Err(_) => {
                if r.type_of(lock) == "zset" && r.zscore(lock, READERS).is_some() {
                    let pttl = r.pttl(lock);
                    return busy(r, i, pttl, None);
                }
                return refused(i);
            }
            Ok(Some(v)) if v == value => {
                mine += 1;
                if raw.ok().flatten().as_deref() != Some(value) {
                    marked.insert(i);
                }
            }
            Ok(Some(v)) => {
                if !v.starts_with("d2:") {
                    return refused(i);
                }
                let pttl = r.pttl(lock);
                return busy(r, i, pttl, raw.ok().flatten().as_deref());
            }
            Ok(None) if turn => {
                let line = Line {
                    q: key(i, 3),
                    ids: key(i, 5),
                    chan: key(i, 4),
                };
                if turn_over(r, m, lock, line, None, Some(num(a.a(5))), None).is_some() {
                    let pttl = r.pttl(lock).max(1);
                    return busy(r, i, pttl, None);
                }
            }
            Ok(None) => {}
        }
    }
    let replay = mine == n && (n > 1 || !turn);
    let mut out = vec![Reply::Int(1)];
    for i in 1..=n {
        let (mut token, mut bad) = (0, false);
        if replay && num(a.a(3)) > 0 {
            let floor = r.get(key(i, 2)).ok().flatten();
            token = lua_number(floor.as_deref().unwrap_or("0")).unwrap_or(0);
        } else if !replay {
            (token, bad) = fence_raise(r, m, key(i, 2), a.a(3));
        }
        if bad {
            return fence_error(key(i, 2), "lock");
        }
        out.push(Reply::Int(token));
    }
    for i in 1..=n {
        let mut set = value.to_owned();
        if turn {
            r.zrem(key(i, 3), value);
            r.hdel(key(i, 5), value);
            if marked.contains(&i) || r.zcard(key(i, 3)) > 0 {
                set.push('+');
            }
        } else if marked.contains(&i) {
            set.push('+');
        }
        r.set(key(i, 1), &set, Some(num(a.a(2))));
    }
    with_id(id, out)
}
