//! What is not a lock's (`store.rs`, `identity.rs`): the fenced write to a user's data and a
//! client's identity record.

use crate::keyspace::Redis;

use super::preludes::num;
use super::{Args, Mutations, Reply};

/// `FENCED_WRITE`.
pub(super) fn fenced_write(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (op, lock, token, keep) = (a.a(1), a.a(2), a.a(3), a.a(4));
    let (key, mark) = if op == "claim" {
        (None, a.key(1))
    } else {
        (a.key(1), a.key(2))
    };
    let below = |theirs: &str| {
        !m.write_without_watermark
            && (token.len() < theirs.len() || (token.len() == theirs.len() && token < theirs))
    };
    let error = |s: String| Reply::Error(s);
    if let Some(mark) = mark {
        let kind = r.type_of(mark);
        if kind != "none" {
            let seen = if kind == "string" {
                r.get(mark).ok().flatten()
            } else {
                None
            };
            let Some(seen) =
                seen.filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            else {
                return error(format!("DISTLOCK_BAD_MARK {kind}"));
            };
            if below(&seen) {
                return error(format!("DISTLOCK_FENCED {seen}"));
            }
        }
    }
    if let Some(key) = key {
        let kind = r.type_of(key);
        if kind != "none" {
            if kind != "hash" {
                return error(format!("DISTLOCK_UNFENCED {kind}"));
            }
            let (Some(seen), Some(of)) = (r.hget(key, "token"), r.hget(key, "lock")) else {
                return error("DISTLOCK_UNFENCED hash".into());
            };
            if of != lock {
                return error(format!("DISTLOCK_OTHER_LOCK {of}"));
            }
            if below(&seen) {
                return error(format!("DISTLOCK_FENCED {seen}"));
            }
        }
    }
    let mut reply = 1;
    match (op, key) {
        ("set", Some(key)) => {
            r.hset(key, "value", a.a(5));
            r.hset(key, "token", token);
            r.hset(key, "lock", lock);
            r.persist(key);
        }
        ("del", Some(key)) => {
            reply = r.hdel(key, "value");
            r.hset(key, "token", token);
            r.hset(key, "lock", lock);
            if keep == "0" {
                r.persist(key);
            } else {
                r.pexpire(key, num(keep));
            }
        }
        _ => {}
    }
    if let Some(mark) = mark {
        let px = (keep != "0").then(|| num(keep));
        r.set(mark, token, px);
    }
    Reply::Int(reply)
}

/// `CLIENT_RECORD`.
pub(super) fn client_record(r: &mut Redis, a: &Args) -> Reply {
    let mut i = 2;
    while let (Some(f), Some(v)) = (a.arg(i), a.arg(i + 1)) {
        r.hset(a.k(1), f, v);
        i += 2;
    }
    r.pexpire(a.k(1), num(a.a(1)));
    Reply::Int(1)
}
