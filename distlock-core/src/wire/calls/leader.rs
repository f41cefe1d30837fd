//! The calls of a leader election's record (`LEADER_PROCLAIM`, `LEADER_CURRENT`; the election
//! itself is the fenced lock of the name): a new leader proclaims its term, anyone reads the
//! current leader and the last terms.

use std::time::Duration;

use crate::lease::millis_ceil;
use crate::wire::keys::LockKeys;
use crate::wire::request::{
    Call, ReplicaWait, Request, LEADER_CANDIDATES_SCRIPT, LEADER_CANDIDATE_SCRIPT,
    LEADER_CURRENT_SCRIPT, LEADER_PROCLAIM_SCRIPT,
};

/// [`LEADER_PROCLAIM`](crate::wire::scripts::LEADER_PROCLAIM): the holder of the election's lock
/// writes its term.
pub(crate) struct ProclaimCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) id: &'a [u8],
    /// The lock value of the leader's hold.
    pub(crate) value: &'a [u8],
    /// The hold's fencing token.
    pub(crate) token: u64,
    pub(crate) identity: &'a str,
    /// How long the fence floor is kept once raised to the term.
    pub(crate) retention: Duration,
    /// The release channel is sharded (a cluster).
    pub(crate) sharded: bool,
    /// The highest term of the name the client has seen (0: none): a new term is above it.
    pub(crate) known: u64,
    /// The term to write (0: none), RedLock's agreement round: every master's record of this
    /// hold is moved up to it.
    pub(crate) exact: u64,
    /// A new term (or the record kept as it is), or a new identity shown for the term.
    pub(crate) mode: ProclaimMode,
    /// The replicas that must acknowledge the record (`min_replicas`), if any.
    pub(crate) wait: Option<ReplicaWait>,
}

/// What a [`ProclaimCall`] does to a record the hold already owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProclaimMode {
    /// Proclaims a new term, or keeps the record already ours as it is (renews its expiry).
    Term,
    /// Shows the call's identity for the term already ours.
    Value,
}

/// A proclaimed term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proclaimed {
    pub(crate) term: u64,
    /// When the term started, in the server's clock (Unix ms).
    pub(crate) since_ms: u64,
    /// The term is written (over RedLock: a majority wrote this very term). `false`: a server
    /// needs a term at least `term` (RedLock: another round, with `exact` at `term`).
    pub(crate) written: bool,
}

impl Call for ProclaimCall<'_> {
    type Raw = (i64, String, i64);
    /// `None`: the lock is not held by this value (nothing written).
    type Reply = Option<Proclaimed>;

    fn request(&self) -> Request {
        let mut cmd = LEADER_PROCLAIM_SCRIPT.evalsha();
        let (leader, terms) = (self.keys.leader(), self.keys.leader_terms());
        cmd.arg(5)
            .arg(self.keys.lock())
            .arg(self.keys.fence())
            .arg(&leader)
            .arg(&terms)
            .arg(self.keys.channel())
            .arg(self.id)
            .arg(self.value)
            .arg(self.token)
            .arg(self.identity)
            .arg(millis_ceil(self.retention))
            .arg(if self.sharded { "s" } else { "-" })
            .arg(self.known)
            .arg(self.exact)
            .arg(match self.mode {
                ProclaimMode::Term => "n",
                ProclaimMode::Value => "v",
            });
        Request::Script(&LEADER_PROCLAIM_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn replica_wait(&self) -> Option<ReplicaWait> {
        self.wait
    }

    fn decode(&self, (status, term, since): (i64, String, i64)) -> Option<Option<Proclaimed>> {
        let proclaimed = |written| {
            Some(Some(Proclaimed {
                term: term.parse().ok()?,
                since_ms: u64::try_from(since).ok()?,
                written,
            }))
        };
        match status {
            0 => Some(None),
            1 => proclaimed(true),
            2 => proclaimed(false),
            _ => None,
        }
    }
}

/// [`LEADER_CURRENT`](crate::wire::scripts::LEADER_CURRENT): the record of a name's election.
pub(crate) struct CurrentCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) id: &'a [u8],
}

/// One term of the record's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TermEntry {
    pub(crate) term: u64,
    pub(crate) since_ms: u64,
    pub(crate) identity: String,
}

/// What [`CurrentCall`] read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Record {
    /// The leader: its term while the lock holds the record's owner.
    pub(crate) leader: Option<TermEntry>,
    /// The record's owner (the leader's lock value), empty without a record.
    pub(crate) owner: String,
    /// The lock's remaining ttl in ms (negative: no lock).
    pub(crate) pttl: i64,
    /// The last terms, newest first.
    pub(crate) terms: Vec<TermEntry>,
}

type CurrentRaw = (i64, String, String, i64, String, i64, Vec<String>);

impl Call for CurrentCall<'_> {
    type Raw = CurrentRaw;
    type Reply = Record;

    fn request(&self) -> Request {
        let mut cmd = LEADER_CURRENT_SCRIPT.evalsha();
        let (leader, terms) = (self.keys.leader(), self.keys.leader_terms());
        cmd.arg(3)
            .arg(self.keys.lock())
            .arg(&leader)
            .arg(&terms)
            .arg(self.id);
        Request::Script(&LEADER_CURRENT_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, raw: CurrentRaw) -> Option<Record> {
        let (held, term, identity, since, owner, pttl, terms) = raw;
        let leader = match held {
            1 => Some(TermEntry {
                term: term.parse().ok()?,
                since_ms: u64::try_from(since).ok()?,
                identity,
            }),
            _ => None,
        };
        let terms = terms.iter().filter_map(|t| parse_term(t)).collect();
        Some(Record {
            leader,
            owner,
            pttl,
            terms,
        })
    }
}

/// `<term> <since> <identity>` (the identity may hold spaces).
fn parse_term(text: &str) -> Option<TermEntry> {
    let mut parts = text.splitn(3, ' ');
    Some(TermEntry {
        term: parts.next()?.parse().ok()?,
        since_ms: parts.next()?.parse().ok()?,
        identity: parts.next().unwrap_or_default().to_owned(),
    })
}

/// [`LEADER_CANDIDATE`](crate::wire::scripts::LEADER_CANDIDATE): a candidate enters (refreshes)
/// or leaves an election's candidates.
pub(crate) struct CandidateCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) id: &'a [u8],
    /// The client's id (`d2:<hex>`), the prefix of its lock values.
    pub(crate) client: &'a str,
    /// What followers will see of it; `None`: it leaves.
    pub(crate) identity: Option<&'a str>,
    /// How long the candidates hash is kept after this write.
    pub(crate) keep: Duration,
}

impl Call for CandidateCall<'_> {
    type Raw = i64;
    type Reply = ();

    fn request(&self) -> Request {
        let mut cmd = LEADER_CANDIDATE_SCRIPT.evalsha();
        cmd.arg(1)
            .arg(self.keys.leader_candidates())
            .arg(self.id)
            .arg(self.client)
            .arg(self.identity.unwrap_or_default())
            .arg(millis_ceil(self.keep));
        Request::Script(&LEADER_CANDIDATE_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, done: i64) -> Option<()> {
        (done == 1).then_some(())
    }
}

/// [`LEADER_CANDIDATES`](crate::wire::scripts::LEADER_CANDIDATES): an election's holder, queue
/// and candidates' identities.
pub(crate) struct CandidatesCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) id: &'a [u8],
}

/// What [`CandidatesCall`] read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Line {
    /// The lock's value (empty: not held).
    pub(crate) holder: String,
    /// The waiters' values, in arrival order.
    pub(crate) queue: Vec<String>,
    /// Client id → identity.
    pub(crate) identities: Vec<(String, String)>,
}

impl Call for CandidatesCall<'_> {
    type Raw = (String, Vec<String>, Vec<String>);
    type Reply = Line;

    fn request(&self) -> Request {
        let mut cmd = LEADER_CANDIDATES_SCRIPT.evalsha();
        cmd.arg(3)
            .arg(self.keys.lock())
            .arg(self.keys.queue())
            .arg(self.keys.leader_candidates())
            .arg(self.id);
        Request::Script(&LEADER_CANDIDATES_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, (holder, queue, flat): Self::Raw) -> Option<Line> {
        let identities = flat
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect();
        Some(Line {
            holder,
            queue,
            identities,
        })
    }
}
