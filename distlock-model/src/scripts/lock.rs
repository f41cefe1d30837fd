//! The lock's own calls (`lock.rs`, `renew.rs`): the plain acquire (`SET NX PX GET`), the
//! fenced acquire, the release of one lock or many, and renewal.

use crate::keyspace::Redis;

use super::preludes::{
    fence_raise, num, permit_release, permit_renew, release_lock, unmark, unwaited, Next,
};
use super::{bulk, with_id, Args, Mutations, Reply};

/// The `WRONGTYPE` error's text.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

/// `fence_error`.
pub(crate) fn fence_error(key: &str, what: &str) -> Reply {
    Reply::Error(format!(
        "ERR distlock: the fence key {key} does not hold a number; delete it to use this {what}"
    ))
}

/// `SET lock value NX PX ttl GET`.
pub(super) fn set_nx_get(r: &mut Redis, a: &Args) -> Reply {
    match r.get(a.k(1)) {
        Err(_) => Reply::Error(WRONGTYPE.into()),
        Ok(Some(old)) => bulk(old),
        Ok(None) => {
            r.set(a.k(1), a.a(1), Some(num(a.a(2))));
            Reply::Nil
        }
    }
}

/// `ACQUIRE_FENCED`.
pub(super) fn acquire_fenced(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let id = a.a(4);
    let v = match r.get(a.k(1)).map(unmark) {
        Err(_) => return with_id(id, vec![Reply::Int(2), Reply::Int(0)]),
        Ok(v) => v,
    };
    let Some(v) = v else {
        let (token, bad) = fence_raise(r, m, a.k(2), a.a(3));
        if bad {
            return fence_error(a.k(2), "lock");
        }
        r.set(a.k(1), a.a(1), Some(num(a.a(2))));
        return with_id(id, vec![Reply::Int(1), Reply::Int(token)]);
    };
    if v == a.a(1) {
        let floor = r.get(a.k(2)).ok().flatten();
        let token = crate::keyspace::lua_number(floor.as_deref().unwrap_or("0")).unwrap_or(0);
        return with_id(id, vec![Reply::Int(1), Reply::Int(token)]);
    }
    if !v.starts_with("d2:") {
        return with_id(id, vec![Reply::Int(2), Reply::Int(0)]);
    }
    let pttl = r.pttl(a.k(1));
    with_id(id, vec![Reply::Int(0), Reply::Int(pttl)])
}

/// The queue keys of a release (`KEYS[3]`, `KEYS[4]`), when given.
fn queue<'a>(q: Option<&'a str>, ids: Option<&'a str>) -> Option<(&'a str, &'a str)> {
    q.zip(ids)
}

/// `RELEASE`.
pub(super) fn release(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (lock, chan) = (a.k(1), a.k(2));
    let q = queue(a.key(3), a.key(4));
    // A release nobody waits for, before the other preludes' functions are made.
    let raw = r.get(lock).ok().flatten();
    if unwaited(
        m,
        raw.as_deref(),
        a.a(1),
        a.a(3),
        q.is_some(),
        a.arg(5).is_some(),
    ) {
        r.del(lock);
        return Reply::Array(vec![bulk(a.a(2)), Reply::Int(0)]);
    }
    let code = match r.get(lock) {
        Err(_) => permit_release(r, m, lock, a.a(1), a.a(3), chan, q).min(0),
        Ok(v) => {
            let next = a.arg(5).map(|value| Next {
                value,
                ticket: a.a(6),
                id: a.a(7),
                life: a.arg(8),
            });
            release_lock(r, m, lock, chan, q, v, a.a(1), a.a(3), next)
        }
    };
    Reply::Array(vec![bulk(a.a(2)), Reply::Int(code)])
}

/// `RELEASE_MANY`.
pub(super) fn release_many(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let per = num(a.a(3)).max(1) as usize;
    let stride = if per == 4 { 6 } else { 2 };
    let mut out = Vec::new();
    for i in 1..=a.nkeys() / per {
        let lock = a.k(per * (i - 1) + 1);
        let chan = a.k(per * (i - 1) + 2);
        let at = 3 + stride * (i - 1);
        let (value, keep) = (a.a(at + 1), a.a(at + 2));
        let q = if per == 4 {
            queue(a.key(per * (i - 1) + 3), a.key(per * (i - 1) + 4))
        } else {
            None
        };
        let code = match r.get(lock) {
            Err(_) => permit_release(r, m, lock, value, keep, chan, q).min(0),
            Ok(v) if per == 4 => {
                let next = a.arg(at + 3).filter(|nv| !nv.is_empty()).map(|nv| Next {
                    value: nv,
                    ticket: a.a(at + 4),
                    id: a.a(at + 5),
                    life: a.arg(at + 6),
                });
                release_lock(r, m, lock, chan, q, v, value, keep, next)
            }
            Ok(v) => release_lock(r, m, lock, chan, None, v, value, keep, None),
        };
        out.push(Reply::Int(code));
    }
    Reply::Array(vec![bulk(a.a(1)), Reply::Array(out)])
}

/// `RENEW`.
pub(super) fn renew(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let mut out = Vec::new();
    for i in 1..=a.nkeys() {
        let key = a.k(i);
        let (ttl, value) = (a.a(2 * i), a.a(2 * i + 1));
        let status = match r.get(key).map(unmark) {
            Err(_) => permit_renew(r, key, value, ttl),
            Ok(Some(v)) if v == value || (m.renew_without_owner_check && v.starts_with("d2:")) => {
                if r.pttl(key) < num(ttl) {
                    r.pexpire(key, num(ttl));
                }
                1
            }
            Ok(None) => 0,
            Ok(Some(v)) if !v.starts_with("d2:") => -2,
            Ok(Some(_)) => -1,
        };
        out.push(Reply::Int(status));
    }
    Reply::Array(vec![bulk(a.a(1)), Reply::Array(out)])
}
