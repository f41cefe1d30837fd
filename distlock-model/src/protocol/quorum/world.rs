//! The world of the RedLock model: its setup (masters, clients, faults, seeded bugs), the
//! masters' and clients' state, and the keys of the one lock name.

use crate::keyspace::Keyspace;
use crate::scripts::{Mutations, Reply};

/// The keys of the one lock name (on every master).
pub mod keys {
    /// The lock.
    pub const LOCK: &str = "l";
    /// The fence floor.
    pub const FENCE: &str = "l:f";
    /// RedLock's waiters' queue.
    pub const QUEUE: &str = "l:q";
    /// When each queued waiter's entry lapses.
    pub const UNTIL: &str = "l:u";
    /// The release channel.
    pub const CHAN: &str = "l:c";
    /// The leader record.
    pub const LEADER: &str = "l:L";
    /// The terms list.
    pub const TERMS: &str = "l:T";
}

/// Seeded bugs of the quorum's client (the runtime's `deploy/redlock/token.rs`, `deploy/redlock`), each
/// off by default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct QuorumBugs {
    /// The token round raises the floor on one master only (the first whose grant counted in
    /// the take) and counts its answer.
    pub raise_one_master: bool,
    /// An acquire counts as taken by one master (no majority).
    pub take_without_majority: bool,
}

/// What the RedLock model runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QuorumSetup {
    /// Clients.
    pub clients: usize,
    /// Masters (3).
    pub masters: usize,
    /// Acquisitions per client.
    pub rounds: u8,
    /// The lease (ms).
    pub ttl: i64,
    /// The lease margin (ms).
    pub margin: i64,
    /// How long a hold lasts before its release (ms).
    pub hold: i64,
    /// How long a waiter waits (ms).
    pub wait: i64,
    /// Time runs to here (ms).
    pub horizon: i64,
    /// Fenced: the token rounds, and a fenced write per hold.
    pub fenced: bool,
    /// A leader election: the holder proclaims its term on the masters.
    pub leader: bool,
    /// Each master's clock minus the real time (ms); missing: 0.
    pub skew: Vec<i64>,
    /// Masters that may go down (one at a time), losing their keyspace.
    pub crashes: u8,
    /// A master that went down restarts empty this long after (ms).
    pub restart_after: i64,
    /// Client pauses, in all.
    pub pauses: u8,
    /// Slow requests, in all.
    pub slow: u8,
    /// How long the fence floor and the leader record are kept (ms).
    pub retention: i64,
    /// How far above the floor it found a raise that lost tries again (µs: `AHEAD`).
    pub ahead: i64,
    /// Raises tried before the acquire gives up (`RAISES`).
    pub raises: u8,
    /// Proclaim rounds before the term is given up (`AGREEMENT_ROUNDS`).
    pub agreement_rounds: u8,
    /// The grace of the waiters ahead of a caller that found the lock free (ms: `TURN_GRACE`).
    pub grace: i64,
    /// The longest a queue entry lives after the attempt that made it (ms: `ENTRY_LAPSE`); an
    /// attempt sends its waiter's wait left, this at most, and `ACQUIRE_QUEUED` caps the
    /// entry's lapse with it.
    pub lapse: i64,
    /// Seeded bugs in the scripts.
    pub mutations: Mutations,
    /// Seeded bugs in the client.
    pub bugs: QuorumBugs,
}

impl Default for QuorumSetup {
    /// Two clients over three masters, a 4 ms lease, holds of 2 ms, one master down once.
    fn default() -> Self {
        QuorumSetup {
            clients: 2,
            masters: 3,
            rounds: 1,
            ttl: 4,
            margin: 1,
            hold: 2,
            wait: 8,
            horizon: 12,
            fenced: false,
            leader: false,
            skew: Vec::new(),
            crashes: 1,
            restart_after: 5,
            pauses: 0,
            slow: 0,
            retention: 100,
            ahead: 1000,
            raises: 2,
            agreement_rounds: 2,
            grace: 2,
            lapse: 9,
            mutations: Mutations::default(),
            bugs: QuorumBugs::default(),
        }
    }
}

/// One master.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Master {
    /// Its keyspace.
    pub ks: Keyspace,
    /// Up (answering).
    pub up: bool,
    /// When it comes back, if down.
    pub back_at: i64,
}

/// What a step broke that no single state shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct QHistory {
    /// The tokens holders accepted, in the order they accepted them.
    pub accepted: Vec<i64>,
    /// A token accepted not above every token accepted before it.
    pub token_went_back: bool,
    /// The highest term a leader counted so far.
    pub max_term: i64,
    /// A leader counted a term not above every earlier one.
    pub term_went_back: bool,
    /// The highest token whose fenced write landed.
    pub max_landed: i64,
    /// A write landed with a token below one that landed before.
    pub stale_write_landed: bool,
    /// A master went down (coverage).
    pub crashed: bool,
    /// A token round lost a raise (coverage).
    pub raise_lost: bool,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QWorld {
    /// The real time (ms).
    pub now: i64,
    /// The masters.
    pub masters: Vec<Master>,
    /// The clients.
    pub clients: Vec<QClient>,
    /// The user's fenced store (a server of its own).
    pub store: Keyspace,
    /// Pauses left.
    pub pauses: u8,
    /// Slow requests left.
    pub slow: u8,
    /// Master crashes left.
    pub crashes: u8,
    /// What steps broke.
    pub history: QHistory,
}

/// A step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QAct {
    /// One ms passes.
    Tick,
    /// Client `c` does what is due.
    Act(usize),
    /// The masters apply client `c`'s requests (those not slow), and the client counts its
    /// call's answers, master `m`'s last if given (it decides only if the others do not).
    Call(usize, Option<usize>),
    /// Master `m` applies client `c`'s slow request to it.
    Deliver(usize, usize),
    /// Client `c`'s next request to master `m` is slow.
    Slow(usize, usize),
    /// Client `c`'s call gives up the slow masters' answers (its response timeout).
    TimeOut(usize),
    /// Client `c` pauses.
    Pause(usize),
    /// Client `c` runs again.
    Resume(usize),
    /// Master `m` goes down, its keyspace lost.
    Crash(usize),
}

impl QuorumSetup {
    /// Master `m`'s clock (ms) at real time `now`.
    pub fn clock(&self, m: usize, now: i64) -> i64 {
        now + self.skew.get(m).copied().unwrap_or(0)
    }

    /// A majority of the masters.
    pub fn majority(&self) -> usize {
        self.masters / 2 + 1
    }
}

/// `{id, {a, b, ...}}`'s inner integers, or `{id, n}`'s `n`.
pub(crate) fn inner(reply: &Reply) -> Vec<i64> {
    crate::protocol::inner(reply)
}

/// A master's answer to the call in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Not answered yet.
    Out,
    /// Its reply.
    Reply(Reply),
    /// It failed (down, or given up by the response timeout).
    Failed,
}

/// A request on its way to one master.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pending {
    /// The call it belongs to (the client's call count).
    pub seq: u8,
    /// The script.
    pub script: &'static str,
    /// Its keys.
    pub keys: Vec<&'static str>,
    /// Its arguments.
    pub argv: Vec<String>,
    /// Slow: not applied before time passes.
    pub slow: bool,
}

/// What the call in flight is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// An acquire attempt (`ACQUIRE_QUEUED`).
    Attempt,
    /// The release of what an attempt that did not take the lock took (`busy`: its pttl, or
    /// `None` after `NoQuorum`).
    Untaken {
        /// The attempt's busy pttl, if it was busy.
        busy: Option<i64>,
    },
    /// The token round's read of a majority's floors.
    Floor {
        /// The take's own largest token.
        taken: i64,
        /// When the take was sent.
        acq_sent: i64,
        /// The first master whose grant counted (where the bug raises the floor).
        first: usize,
    },
    /// The token round's raise of a majority's floors.
    Raise {
        /// The token raised to.
        token: i64,
        /// Raises left after this one.
        left: u8,
        /// When the take was sent.
        acq_sent: i64,
        /// The first master whose grant counted.
        first: usize,
    },
    /// A leader's proclaim (`exact`: the term to write, 0 for none).
    Proclaim {
        /// The term to write (0: none).
        exact: i64,
        /// Rounds left after this one.
        left: u8,
    },
}

/// The call in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InCall {
    /// What it is.
    pub step: Step,
    /// When it was sent.
    pub sent: i64,
    /// Its number.
    pub seq: u8,
    /// Each master's answer.
    pub answers: Vec<Answer>,
}

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QPhase {
    /// Between acquisitions.
    Idle,
    /// Acquiring (its attempts, and the token rounds of a take).
    Waiting {
        /// When the acquire started (its ticket's time).
        started: i64,
        /// When it attempts next (`None`: only a wake).
        next_at: Option<i64>,
        /// Subscribed and queued on the masters.
        queued: bool,
    },
    /// Holding (believed while `now < until`).
    Holding {
        /// Believed until here.
        until: i64,
        /// Its fencing token (0: none).
        token: i64,
        /// When it lets go.
        release_at: i64,
        /// Its fenced write is done.
        written: bool,
        /// Its term is counted (a leader).
        proclaimed: bool,
        /// When it proclaims (again).
        proclaim_at: i64,
    },
    /// Every acquisition done.
    Done,
}

/// A client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QClient {
    /// Its number.
    pub id: usize,
    /// Acquisitions started.
    pub round: u8,
    /// Holds taken.
    pub taken: u8,
    /// A hold taken after a master went down (coverage).
    pub taken_after_crash: bool,
    /// Where it is.
    pub phase: QPhase,
    /// Its call in flight.
    pub call: Option<InCall>,
    /// Its requests on their way, per master, in order.
    pub out: Vec<Vec<Pending>>,
    /// Paused.
    pub paused: bool,
    /// The masters whose release message it heard since its last attempt (a bit each).
    pub heard: u8,
    /// Calls sent.
    pub seq: u8,
    /// The highest term it has seen.
    pub known_term: i64,
}

pub(super) fn t(v: impl ToString) -> String {
    v.to_string()
}

impl QClient {
    pub(super) fn new(id: usize, masters: usize) -> QClient {
        QClient {
            id,
            round: 0,
            taken: 0,
            taken_after_crash: false,
            phase: QPhase::Idle,
            call: None,
            out: vec![Vec::new(); masters],
            paused: false,
            heard: 0,
            seq: 0,
            known_term: 0,
        }
    }

    /// The lock value of its current acquisition.
    pub fn value(&self) -> String {
        format!("d2:c{}r{}", self.id, self.round)
    }

    /// Whether `ensure_held` is `Ok` at `now`.
    pub fn believes(&self, now: i64) -> bool {
        matches!(self.phase, QPhase::Holding { until, .. } if now < until)
    }

    /// The masters whose answer to the call in flight the next flush brings (its request to
    /// them not slow, nor behind a slow one): each may be the one that answers last.
    pub(super) fn answering(&self) -> Vec<usize> {
        let Some(call) = &self.call else {
            return Vec::new();
        };
        (0..self.out.len())
            .filter(|&m| {
                call.answers[m] == Answer::Out
                    && self.out[m].first().is_some_and(|p| !p.slow)
                    && self.out[m].iter().any(|p| p.seq == call.seq)
            })
            .collect()
    }

    /// Its call waits only for masters whose request is slow.
    pub(super) fn waits_for_slow_only(&self) -> bool {
        let Some(call) = &self.call else { return false };
        let out: Vec<usize> = (0..call.answers.len())
            .filter(|&m| call.answers[m] == Answer::Out)
            .collect();
        !out.is_empty()
            && out
                .iter()
                .all(|&m| self.out[m].first().is_some_and(|p| p.slow))
    }

    /// Something is due.
    pub(super) fn due(&self, s: &QuorumSetup, now: i64) -> bool {
        match &self.phase {
            QPhase::Idle => self.round < s.rounds,
            QPhase::Waiting {
                started,
                next_at,
                queued,
            } => {
                next_at.is_some_and(|at| at <= now)
                    || now >= started + s.wait
                    || (*queued && self.heard.count_ones() as usize >= wake_after(s))
            }
            QPhase::Holding {
                release_at,
                written,
                proclaimed,
                proclaim_at,
                ..
            } => {
                (s.leader && !proclaimed && *proclaim_at <= now)
                    || *release_at <= now
                    || (s.fenced && !written)
            }
            QPhase::Done => false,
        }
    }

    /// Must it act before time passes (a start may come at any time, a fenced write late)?
    pub(super) fn forced(&self, s: &QuorumSetup, now: i64) -> bool {
        match &self.phase {
            QPhase::Idle => false,
            QPhase::Holding {
                release_at,
                proclaimed,
                proclaim_at,
                ..
            } => (s.leader && !proclaimed && *proclaim_at <= now) || *release_at <= now,
            _ => self.due(s, now),
        }
    }
}

/// Release messages from this many masters wake a waiter (`n - majority(n) + 1`).
fn wake_after(s: &QuorumSetup) -> usize {
    s.masters - s.majority() + 1
}
