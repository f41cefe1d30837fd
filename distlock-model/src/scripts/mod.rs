//! The reference model of every script in `distlock-core/src/wire/scripts/` (and of the plain
//! acquire, `SET ... NX PX GET`, which is no script): each a Rust function over the modelled
//! keyspace, written to follow its Lua line for line, taking the script's own `KEYS` and
//! `ARGV` and answering the reply Redis would send. The conformance test runs the real scripts
//! and these side by side and compares every reply, every key and every message; the protocol
//! model ([`crate::protocol`]) runs these as its server.
//!
//! The [`Mutations`] are seeded bugs, each off by default: the mutation tests turn one on and
//! assert that the checker finds the property it breaks violated.

mod handoff;
mod leader;
mod lock;
mod preludes;
mod redlock;
mod sets;
mod shared;
mod store;

use crate::keyspace::{Keyspace, Redis};

pub use preludes::{PERMITS, READERS, WRITER_LAPSE};

/// A reply, as RESP2 carries it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Nil (Lua `false` or a nil bulk).
    Nil,
    /// An integer (a Lua number, truncated).
    Int(i64),
    /// A bulk string.
    Bulk(String),
    /// An array.
    Array(Vec<Reply>),
    /// An error reply (its text).
    Error(String),
}

impl Reply {
    /// The array's items (none for anything else).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(a) => a,
            _ => &[],
        }
    }

    /// The integer (None for anything else).
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }
}

/// A bulk string reply.
pub(crate) fn bulk(s: impl Into<String>) -> Reply {
    Reply::Bulk(s.into())
}

/// `{id, {a, b, ...}}`: the shape of nearly every reply.
pub(crate) fn with_id(id: &str, items: Vec<Reply>) -> Reply {
    Reply::Array(vec![bulk(id), Reply::Array(items)])
}

/// Seeded bugs in the scripts' model, each breaking one property (see `docs/protocol.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mutations {
    /// A free lock is taken by whoever asks, not only by the first waiter (`ACQUIRE_HANDED`
    /// skips its queue check).
    pub skip_queue_check: bool,
    /// `RENEW` extends the lock whoever holds it.
    pub renew_without_owner_check: bool,
    /// A release lets go of the lock whoever holds it.
    pub release_without_owner_check: bool,
    /// A release hands the lock over for this many ms whatever the waiter's window (0: off):
    /// the grant outlasts what the waiter was told, or falls short of what it trusts.
    pub grant_for_ttl: i64,
    /// The fencing token is the server's clock alone, not raised above the floor.
    pub token_from_clock_only: bool,
    /// `FENCED_WRITE` does not compare with the watermark.
    pub write_without_watermark: bool,
    /// A lock let go is deleted and woken even with waiters queued (nobody is handed it).
    pub let_go_without_handoff: bool,
    /// `ACQUIRE_PERMIT` in a waiter's turn takes a free permit without handing the waiters
    /// queued before it theirs first (it skips its queue check).
    pub permit_skips_queue: bool,
    /// `ACQUIRE_READ` lets a reader in past a writer queued before it that waits for the
    /// readers inside (the reader ignores the writer's place in the line).
    pub reader_passes_writer: bool,
    /// `ACQUIRE_PERMIT` counts one permit more than the semaphore has.
    pub permit_off_by_one: bool,
    /// `turn_over` hands a writer the lock without looking for readers inside.
    pub writer_ignores_readers: bool,
    /// `ACQUIRE_ALL` looks at its first lock only before it sets them all.
    pub set_checks_first_only: bool,
    /// A release deletes its own lock with no queue read and no message even when the lock is
    /// marked (`+`: someone waits for it), so nobody is handed it and nobody is woken.
    pub release_ignores_marks: bool,
    /// `LEADER_PROCLAIM` writes the hold's token as the term even when it is not above the
    /// last term written.
    pub term_from_token_only: bool,
    /// A queue entry is recorded without its lapse (`enqueue` ignores the life it is sent, as
    /// before issue 48): a grant never skips the entry of a waiter that went away.
    pub entry_without_lapse: bool,
    /// A lock or permits found free with a lapsed grantee's record are not swept (`sweep`
    /// does nothing, as before issue 48): that client's other entries are granted in turn.
    pub no_sweep: bool,
    /// `ACQUIRE_HANDED` queues a waiter behind a held lock without marking it.
    pub handed_writes_no_mark: bool,
    /// `ACQUIRE_ALL` waits at a held lock of its set without marking it.
    pub set_writes_no_mark: bool,
    /// `ACQUIRE_READ` queues a reader behind a writer's lock without marking it.
    pub reader_writes_no_mark: bool,
    /// `turn_over` sets the lock it hands a writer unmarked.
    pub grant_writes_no_mark: bool,
}

/// Every script the model covers: the name of its constant in `distlock::scripts`.
pub const COVERED: &[&str] = &[
    "ACQUIRE_FENCED",
    "RELEASE",
    "RELEASE_MANY",
    "RENEW",
    "ACQUIRE_HANDED",
    "LEAVE_QUEUE",
    "ACQUIRE_QUEUED",
    "FENCE_FLOOR",
    "ACQUIRE_PERMIT",
    "ACQUIRE_READ",
    "ACQUIRE_WRITE",
    "ACQUIRE_ALL",
    "LEADER_PROCLAIM",
    "LEADER_CURRENT",
    "LEADER_CANDIDATE",
    "LEADER_CANDIDATES",
    "FENCED_WRITE",
    "CLIENT_RECORD",
];

/// What the server ran: its reply and the messages it published, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ran {
    /// The reply.
    pub reply: Reply,
    /// (channel, message), in order.
    pub published: Vec<(String, String)>,
}

/// Runs script `name` (a [`COVERED`] name, or `SET_NX_GET` for the plain acquire `SET lock
/// value NX PX ttl GET`: `KEYS` lock, `ARGV` value and ttl) on `ks` at the server clock
/// `now_us` with these `keys` and `argv`, as Redis would (an unknown name is an error reply).
pub fn run(
    name: &str,
    ks: &mut Keyspace,
    now_us: i64,
    keys: &[&str],
    argv: &[&str],
    m: &Mutations,
) -> Ran {
    let mut r = Redis::new(ks, now_us);
    let a = Args { keys, argv };
    let reply = match name {
        "SET_NX_GET" => lock::set_nx_get(&mut r, &a),
        "ACQUIRE_FENCED" => lock::acquire_fenced(&mut r, &a, m),
        "RELEASE" => lock::release(&mut r, &a, m),
        "RELEASE_MANY" => lock::release_many(&mut r, &a, m),
        "RENEW" => lock::renew(&mut r, &a, m),
        "ACQUIRE_HANDED" => handoff::acquire_handed(&mut r, &a, m),
        "LEAVE_QUEUE" => handoff::leave_queue(&mut r, &a, m),
        "ACQUIRE_QUEUED" => redlock::acquire_queued(&mut r, &a, m),
        "FENCE_FLOOR" => redlock::fence_floor(&mut r, &a),
        "ACQUIRE_PERMIT" => shared::acquire_permit(&mut r, &a, m),
        "ACQUIRE_READ" => shared::acquire_read(&mut r, &a, m),
        "ACQUIRE_WRITE" => shared::acquire_write(&mut r, &a, m),
        "ACQUIRE_ALL" => sets::acquire_all(&mut r, &a, m),
        "LEADER_PROCLAIM" => leader::proclaim(&mut r, &a, m),
        "LEADER_CURRENT" => leader::current(&mut r, &a),
        "LEADER_CANDIDATE" => leader::candidate(&mut r, &a),
        "LEADER_CANDIDATES" => leader::candidates(&mut r, &a),
        "FENCED_WRITE" => store::fenced_write(&mut r, &a, m),
        "CLIENT_RECORD" => store::client_record(&mut r, &a),
        other => Reply::Error(format!("ERR the model has no script {other}")),
    };
    Ran {
        reply,
        published: r.published,
    }
}

/// A script's `KEYS` and `ARGV`, 1-based as in Lua (`nil` past the end).
pub(crate) struct Args<'a> {
    keys: &'a [&'a str],
    argv: &'a [&'a str],
}

impl<'a> Args<'a> {
    /// `KEYS[i]`.
    pub(crate) fn key(&self, i: usize) -> Option<&'a str> {
        self.keys.get(i.wrapping_sub(1)).copied()
    }

    /// `KEYS[i]`, which the script always has.
    pub(crate) fn k(&self, i: usize) -> &'a str {
        self.key(i).unwrap_or("")
    }

    /// `ARGV[i]`.
    pub(crate) fn arg(&self, i: usize) -> Option<&'a str> {
        self.argv.get(i.wrapping_sub(1)).copied()
    }

    /// `ARGV[i]`, which the script always has.
    pub(crate) fn a(&self, i: usize) -> &'a str {
        self.arg(i).unwrap_or("")
    }

    /// `#KEYS`.
    pub(crate) fn nkeys(&self) -> usize {
        self.keys.len()
    }
}
