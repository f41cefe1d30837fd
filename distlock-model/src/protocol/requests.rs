//! What a modelled client sends, as `lock::kind` and the wire calls place it: each request's
//! script, keys and arguments, by what the client holds.

use super::server::keys;
use super::{Hold, Setup};

/// The keys of one lock name.
#[derive(PartialEq, Eq)]
pub(super) struct Name {
    pub(super) lock: &'static str,
    pub(super) queue: &'static str,
    pub(super) ids: &'static str,
    pub(super) until: &'static str,
    pub(super) chan: &'static str,
    pub(super) fence: &'static str,
}

/// The lock every kind but a set's second lock is at.
pub(super) const L: Name = Name {
    lock: keys::LOCK,
    queue: keys::QUEUE,
    ids: keys::IDS,
    until: keys::UNTIL,
    chan: keys::CHAN,
    fence: keys::FENCE,
};

/// A set's second lock.
pub(super) const M: Name = Name {
    lock: keys::LOCK2,
    queue: "m:q",
    ids: "m:i",
    until: "m:u",
    chan: "m:c",
    fence: "m:f",
};

/// What client `c` holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The lock at a name (exclusive).
    Writer(&'static Name),
    /// A read hold.
    Reader,
    /// A permit of `n`.
    Permit(u8),
    /// Both locks, as a set.
    Set,
}

pub(super) fn role(st: &Setup, c: usize) -> Role {
    match st.hold_kind {
        Hold::Lock => Role::Writer(&L),
        Hold::Permits(n) => Role::Permit(n),
        Hold::ReadWrite { readers } if c < readers => Role::Reader,
        Hold::ReadWrite { .. } => Role::Writer(&L),
        Hold::Sets if c == 0 => Role::Set,
        Hold::Sets if c == 2 => Role::Writer(&M),
        Hold::Sets => Role::Writer(&L),
    }
}

/// Whether client `c` confirms a grant with one more attempt instead of trusting it.
pub(super) fn confirms(st: &Setup, c: usize) -> bool {
    st.fenced || st.min_replicas || role(st, c) == Role::Set
}

/// The names client `c`'s hold covers.
pub(super) fn covers(st: &Setup, c: usize) -> &'static [&'static str] {
    match role(st, c) {
        Role::Set => &[keys::LOCK, keys::LOCK2],
        Role::Writer(n) if n.lock == keys::LOCK2 => &[keys::LOCK2],
        _ => &[keys::LOCK],
    }
}

/// A request: the script, its keys, its arguments.
pub(super) type Request = (&'static str, Vec<&'static str>, Vec<String>);

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// The ticket of an acquire started at `started` (`handed_ticket`).
pub(super) fn ticket(s: &Setup, started: i64) -> i64 {
    started * 1024 + s.window
}

/// The life of a queue entry made at `now` for a waiter whose acquire started at `started`
/// (`entry_life`): until its wait ends, [`Setup::lapse`] at most, 1 ms at least.
pub(super) fn life(st: &Setup, started: i64, now: i64) -> i64 {
    (started + st.wait - now).min(st.lapse).max(1)
}

/// An acquire attempt at `now` (`queued`: in its turn, after its first found the hold busy).
pub(super) fn attempt(
    st: &Setup,
    c: usize,
    (value, id): (String, String),
    (started, now): (i64, i64),
    queued: bool,
) -> Request {
    let retention = s(if st.fenced { st.retention } else { 0 });
    let ticket = s(ticket(st, started));
    let life = s(life(st, started, now));
    match role(st, c) {
        Role::Permit(n) => {
            let mut k = vec![L.lock, L.fence];
            let mut argv = vec![value, s(st.ttl), s(n), retention, id];
            if queued {
                k.extend([L.queue, L.chan, L.ids]);
                argv.extend([ticket, s("-"), life]);
            }
            ("ACQUIRE_PERMIT", k, argv)
        }
        Role::Reader => {
            let k = vec![
                L.lock,
                L.fence,
                keys::WRITER,
                L.queue,
                L.chan,
                L.ids,
                L.until,
            ];
            let (ticket, life) = if queued { (ticket, life) } else { (s(0), s(0)) };
            let argv = vec![value, s(st.ttl), retention, id, ticket, s("-"), life];
            ("ACQUIRE_READ", k, argv)
        }
        Role::Set => {
            let mut k = Vec::new();
            for n in [&L, &M] {
                k.extend([n.lock, n.fence]);
                if queued {
                    k.extend([n.queue, n.chan, n.ids]);
                }
            }
            let mut argv = vec![value, s(st.ttl), retention, id];
            if queued {
                argv.extend([ticket, s("-"), life]);
            }
            ("ACQUIRE_ALL", k, argv)
        }
        Role::Writer(n) if queued => {
            let mut k = vec![n.lock, n.queue, n.chan, n.ids, n.until];
            let mut argv = vec![value, s(st.ttl), id, ticket, s(st.window), s("-"), life];
            if confirms(st, c) {
                k.push(n.fence);
                argv.push(retention);
            }
            ("ACQUIRE_HANDED", k, argv)
        }
        Role::Writer(n) if st.fenced => (
            "ACQUIRE_FENCED",
            vec![n.lock, n.fence],
            vec![value, s(st.ttl), retention, id],
        ),
        Role::Writer(n) => ("SET_NX_GET", vec![n.lock], vec![value, s(st.ttl)]),
    }
}

/// The names a client's requests touch, by its role.
fn names(st: &Setup, c: usize) -> Vec<&'static Name> {
    match role(st, c) {
        Role::Set => vec![&L, &M],
        Role::Writer(n) => vec![n],
        _ => vec![&L],
    }
}

/// A waiter whose wait ran out leaves the queue (handing on a lock handed to it).
pub(super) fn leave(st: &Setup, c: usize, (value, id): (String, String)) -> Request {
    let mut k = Vec::new();
    for n in names(st, c) {
        k.extend([n.queue, n.until, n.lock, n.chan, n.ids]);
    }
    ("LEAVE_QUEUE", k, vec![value, id, s("-"), s(5)])
}

/// A renewal of every lock of the hold.
pub(super) fn renew(st: &Setup, c: usize, (value, id): (String, String)) -> Request {
    let names = names(st, c);
    let mut argv = vec![id];
    for _ in &names {
        argv.extend([s(st.ttl), value.clone()]);
    }
    ("RENEW", names.iter().map(|n| n.lock).collect(), argv)
}

/// A next waiter a release carries (`NextWaiter`): its value, ticket, the request id its
/// grant will name, and its entry's life.
pub(super) type Carried = (String, i64, String, i64);

/// The release (a set's: one `RELEASE_MANY`), carrying `next` (a waiter of the same process).
pub(super) fn release(
    st: &Setup,
    c: usize,
    (value, id): (String, String),
    next: Option<Carried>,
) -> Request {
    let names = names(st, c);
    if names.len() == 1 {
        let n = names[0];
        let k = vec![n.lock, n.chan, n.queue, n.ids];
        let mut argv = vec![value, id, s(0), s("-")];
        if let Some((nv, nt, nid, nl)) = next {
            argv.extend([nv, s(nt), nid, s(nl)]);
        }
        return ("RELEASE", k, argv);
    }
    let mut k = Vec::new();
    let mut argv = vec![id, s("-"), s(4)];
    for n in names {
        k.extend([n.lock, n.chan, n.queue, n.ids]);
        argv.extend([value.clone(), s(0), s(""), s(0), s(""), s(0)]);
    }
    ("RELEASE_MANY", k, argv)
}

/// A leader's proclaim of the hold with `token`, knowing terms up to `known`.
pub(super) fn proclaim(
    st: &Setup,
    c: usize,
    (value, id): (String, String),
    token: i64,
    known: i64,
) -> Request {
    let argv = vec![
        id,
        value,
        s(token),
        format!("c{c}"),
        s(st.retention),
        s("-"),
        s(known),
        s(0),
        s("n"),
    ];
    let k = vec![L.lock, L.fence, keys::LEADER, keys::TERMS, L.chan];
    ("LEADER_PROCLAIM", k, argv)
}
