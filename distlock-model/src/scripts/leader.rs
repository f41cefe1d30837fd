//! A leader election's record (`leader.rs`): the proclaim, the current leader, the candidates.

use crate::keyspace::Redis;

use super::preludes::{mark, num, unmark};
use super::{bulk, with_id, Args, Mutations, Reply};

/// How many terms the terms list keeps.
const TERMS_KEPT: usize = 32;

/// `above(a, b)`: decimal strings compared as numbers (length, then bytes).
fn above(a: &str, b: &str) -> bool {
    a.len() > b.len() || (a.len() == b.len() && a > b)
}

fn plus1(a: &str) -> String {
    (num(a) + 1).to_string()
}

/// `LEADER_PROCLAIM`.
pub(super) fn proclaim(r: &mut Redis, a: &Args, m: &Mutations) -> Reply {
    let (lock, fence, record, terms, chan) = (a.k(1), a.k(2), a.k(3), a.k(4), a.k(5));
    let (id, value, identity_arg) = (a.a(1), a.a(2), a.a(4));
    match r.get(lock) {
        Err(_) => return Reply::Error("ERR script error".into()),
        Ok(raw) if unmark(raw.clone()).as_deref() != Some(value) => {
            return with_id(id, vec![Reply::Int(0), bulk("0"), Reply::Int(0)])
        }
        Ok(raw) => mark(r, lock, raw.as_deref().unwrap_or_default()),
    }
    let retention = num(a.a(5));
    let keep = |r: &mut Redis, term: &str| {
        let floor = r.get(fence).ok().flatten();
        if floor.as_deref().is_none_or(|f| above(term, f)) {
            r.set(fence, term, Some(retention));
        } else {
            let left = r.pttl(fence);
            if left >= 0 && left < retention {
                r.pexpire(fence, retention);
            }
        }
        r.pexpire(record, retention);
        r.pexpire(terms, retention);
    };
    let exact = a.a(8);
    let rec_term = r.hget(record, "term");
    let rec_owner = r.hget(record, "owner");
    let rec_since = r.hget(record, "since");
    let rec_identity = r.hget(record, "identity");
    if rec_owner.as_deref() == Some(value) {
        let old = rec_term.clone().unwrap_or_default();
        let since = rec_since.clone().unwrap_or_default();
        let (mut term, mut identity, mut changed) =
            (old.clone(), rec_identity.unwrap_or_default(), false);
        if exact != "0" && above(exact, &term) {
            (term, changed) = (exact.to_owned(), true);
        }
        if a.a(9) == "v" && identity != identity_arg {
            (identity, changed) = (identity_arg.to_owned(), true);
        }
        if changed {
            r.hset(record, "term", &term);
            r.hset(record, "identity", &identity);
            let entry = format!("{term} {since} {identity}");
            let head = r.lindex(terms, 0);
            if head.is_some_and(|h| h.starts_with(&format!("{old} "))) {
                r.lset(terms, 0, &entry);
            } else {
                r.lpush(terms, &entry);
                r.ltrim_to(terms, TERMS_KEPT - 1);
            }
        }
        keep(r, &term);
        if changed {
            r.publish(chan, "1");
        }
        return with_id(id, vec![Reply::Int(1), bulk(term), Reply::Int(num(&since))]);
    }
    let mut term = a.a(3).to_owned();
    if !m.term_from_token_only {
        if let Some(seen) = rec_term.as_deref() {
            if !above(&term, seen) {
                term = plus1(seen);
            }
        }
        if !above(&term, a.a(7)) {
            term = plus1(a.a(7));
        }
    }
    if exact != "0" {
        if above(&term, exact) {
            return with_id(id, vec![Reply::Int(2), bulk(term), Reply::Int(0)]);
        }
        term = exact.to_owned();
    }
    let (s, us) = r.time();
    let since = s * 1000 + us / 1000;
    r.hset(record, "term", &term);
    r.hset(record, "identity", identity_arg);
    r.hset(record, "since", &since.to_string());
    r.hset(record, "owner", value);
    r.lpush(terms, &format!("{term} {since} {identity_arg}"));
    r.ltrim_to(terms, TERMS_KEPT - 1);
    keep(r, &term);
    r.publish(chan, "1");
    with_id(id, vec![Reply::Int(1), bulk(term), Reply::Int(since)])
}

/// `LEADER_CURRENT`.
pub(super) fn current(r: &mut Redis, a: &Args) -> Reply {
    let (lock, record, terms) = (a.k(1), a.k(2), a.k(3));
    let field = |r: &mut Redis, f: &str| r.hget(record, f);
    let (term, identity, since, owner) = (
        field(r, "term"),
        field(r, "identity"),
        field(r, "since"),
        field(r, "owner"),
    );
    let mut held = 0;
    if let Some(owner) = &owner {
        if r.type_of(lock) == "string"
            && unmark(r.get(lock).ok().flatten()).as_deref() == Some(owner)
        {
            held = 1;
        }
    }
    let list = r.lrange(terms).into_iter().map(bulk).collect();
    let pttl = r.pttl(lock);
    with_id(
        a.a(1),
        vec![
            Reply::Int(held),
            bulk(term.unwrap_or_else(|| "0".into())),
            bulk(identity.unwrap_or_default()),
            Reply::Int(num(since.as_deref().unwrap_or("0"))),
            bulk(owner.unwrap_or_default()),
            Reply::Int(pttl),
            Reply::Array(list),
        ],
    )
}

/// `LEADER_CANDIDATE`.
pub(super) fn candidate(r: &mut Redis, a: &Args) -> Reply {
    if a.a(3).is_empty() {
        r.hdel(a.k(1), a.a(2));
    } else {
        r.hset(a.k(1), a.a(2), a.a(3));
        r.pexpire(a.k(1), num(a.a(4)));
    }
    Reply::Array(vec![bulk(a.a(1)), Reply::Int(1)])
}

/// `LEADER_CANDIDATES` (the hash's pairs in field order: the comparison sorts Redis's too).
pub(super) fn candidates(r: &mut Redis, a: &Args) -> Reply {
    let holder = if r.type_of(a.k(1)) == "string" {
        unmark(r.get(a.k(1)).ok().flatten()).unwrap_or_default()
    } else {
        String::new()
    };
    let queue = if r.type_of(a.k(2)) == "zset" {
        r.zrange(a.k(2), 0, -1)
            .into_iter()
            .map(|(m, _)| bulk(m))
            .collect()
    } else {
        Vec::new()
    };
    let pairs = r
        .hgetall(a.k(3))
        .into_iter()
        .flat_map(|(f, v)| [bulk(f), bulk(v)])
        .collect();
    with_id(
        a.a(1),
        vec![bulk(holder), Reply::Array(queue), Reply::Array(pairs)],
    )
}
