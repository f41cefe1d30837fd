//! A client of the quorum: `lock::wait_loop`'s loop over RedLock, `lock/quorum_token.rs`'s token rounds
//! and `leader/leadership.rs`'s proclaim agreement, each call sent to every master and counted
//! by [`super::count`].

use crate::protocol::server::keys::{DATA, MARK};
use crate::scripts::{self, Reply};

use super::keys;
pub(super) use super::settle::settle;
use super::settle::settle_with;
use super::{QWorld, QuorumSetup};

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

/// Sends a call to `to` (every master unless given), the client's call in flight.
pub(super) fn send(
    w: &mut QWorld,
    c: usize,
    step: Step,
    req: (&'static str, Vec<&'static str>, Vec<String>),
    to: Option<usize>,
) {
    let now = w.now;
    let cl = &mut w.clients[c];
    cl.seq = cl.seq.wrapping_add(1);
    let seq = cl.seq;
    let masters = cl.out.len();
    let mut answers = vec![Answer::Out; masters];
    for (m, answer) in answers.iter_mut().enumerate() {
        if to.is_some_and(|t| t != m) {
            *answer = Answer::Failed;
            continue;
        }
        cl.out[m].push(Pending {
            seq,
            script: req.0,
            keys: req.1.clone(),
            argv: req.2.clone(),
            slow: false,
        });
    }
    cl.call = Some(InCall {
        step,
        sent: now,
        seq,
        answers,
    });
}

pub(super) fn request_id(w: &QWorld, c: usize) -> String {
    format!("c{c}q{}", w.clients[c].seq.wrapping_add(1))
}

/// Master `m` applies client `c`'s next request (its answer recorded, its messages heard).
fn apply(s: &QuorumSetup, w: &mut QWorld, c: usize, m: usize) {
    if w.clients[c].out[m].is_empty() {
        return;
    }
    let p = w.clients[c].out[m].remove(0);
    let answer = if w.masters[m].up {
        let at = s.clock(m, w.now);
        let k: Vec<&str> = p.keys.clone();
        let argv: Vec<&str> = p.argv.iter().map(String::as_str).collect();
        let ran = scripts::run(
            p.script,
            &mut w.masters[m].ks,
            at * 1000,
            &k,
            &argv,
            &s.mutations,
        );
        w.masters[m].ks.purge(at);
        if !ran.published.is_empty() {
            for other in w.clients.iter_mut() {
                if matches!(other.phase, QPhase::Waiting { queued: true, .. }) {
                    other.heard |= 1 << m;
                }
            }
        }
        Answer::Reply(ran.reply)
    } else {
        Answer::Failed
    };
    if let Some(call) = w.clients[c].call.as_mut() {
        if call.seq == p.seq && call.answers[m] == Answer::Out {
            call.answers[m] = answer;
        }
    }
}

/// The masters apply client `c`'s requests that are not slow, and the client counts its
/// call's answers, master `late`'s (if given) only if the others do not decide it: which
/// master answers last is the model's choice.
pub(super) fn flush(s: &QuorumSetup, w: &mut QWorld, c: usize, late: Option<usize>) {
    for m in 0..w.masters.len() {
        while w.clients[c].out[m].first().is_some_and(|p| !p.slow) {
            apply(s, w, c, m);
        }
    }
    settle_with(s, w, c, late);
}

/// Master `m` applies client `c`'s slow request (and those behind it), late.
pub(super) fn deliver(s: &QuorumSetup, w: &mut QWorld, c: usize, m: usize) {
    apply(s, w, c, m);
    while w.clients[c].out[m].first().is_some_and(|p| !p.slow) {
        apply(s, w, c, m);
    }
    settle(s, w, c);
}

/// Client `c`'s call gives up the masters that have not answered.
pub(super) fn time_out(s: &QuorumSetup, w: &mut QWorld, c: usize) {
    if let Some(call) = w.clients[c].call.as_mut() {
        for a in call.answers.iter_mut() {
            if *a == Answer::Out {
                *a = Answer::Failed;
            }
        }
    }
    settle(s, w, c);
}

/// Master `m` went down: the requests on their way to it fail.
pub(super) fn master_down(s: &QuorumSetup, w: &mut QWorld, m: usize) {
    for c in 0..w.clients.len() {
        let cl = &mut w.clients[c];
        cl.out[m].clear();
        if let Some(call) = cl.call.as_mut() {
            if call.answers[m] == Answer::Out {
                call.answers[m] = Answer::Failed;
            }
        }
        settle(s, w, c);
    }
}

/// The token round's raise to `token`.
/// The token round's raise to `token` (`left` raises after it, the take sent at `acq_sent`,
/// `first` the first master whose grant counted).
pub(super) fn raise(
    s: &QuorumSetup,
    w: &mut QWorld,
    c: usize,
    token: i64,
    (left, acq_sent, first): (u8, i64, usize),
) {
    let id = request_id(w, c);
    let req = (
        "FENCE_FLOOR",
        vec![keys::FENCE],
        vec![id, t(token), t(s.retention)],
    );
    let step = Step::Raise {
        token,
        left,
        acq_sent,
        first,
    };
    let to = s.bugs.raise_one_master.then_some(first);
    send(w, c, step, req, to);
}

/// An attempt that did not take the lock releases what a minority granted (if any master
/// may have), then waits (busy) or pauses (`NoQuorum`).
pub(super) fn untaken(s: &QuorumSetup, w: &mut QWorld, c: usize, call: &InCall, busy: Option<i64>) {
    w.clients[c].call = None;
    let granted = call.answers.iter().any(|a| match a {
        Answer::Reply(r) => super::inner(r).first() == Some(&1),
        _ => true,
    });
    if !granted {
        return after_untaken(s, w, c, busy);
    }
    let id = request_id(w, c);
    let value = w.clients[c].value();
    let req = (
        "RELEASE",
        vec![keys::LOCK, keys::CHAN],
        vec![value, id, t(0), t("-")],
    );
    send(w, c, Step::Untaken { busy }, req, None);
}

/// After an attempt that did not take the lock (and the release of its minority's grants).
pub(super) fn after_untaken(s: &QuorumSetup, w: &mut QWorld, c: usize, busy: Option<i64>) {
    let now = w.now;
    let cl = &mut w.clients[c];
    let QPhase::Waiting {
        started,
        next_at,
        queued,
    } = &mut cl.phase
    else {
        return;
    };
    let give_up = *started + s.wait;
    *next_at = Some(match busy {
        // A transient failure: a pause (the backoff's), then again.
        None => (now + 1).min(give_up),
        // Busy at the first attempt: subscribe, then queue at once.
        Some(_) if !*queued => {
            *queued = true;
            now
        }
        Some(pttl) => (now + pttl.max(1)).min(give_up),
    });
}

/// The acquire failed after its take (a token round without a quorum, or out of validity):
/// its cleanup releases the lock; the next acquisition.
pub(super) fn fail(s: &QuorumSetup, w: &mut QWorld, c: usize) {
    w.clients[c].call = None;
    release(s, w, c);
}

/// The hold is taken, believed until `until`, with `token`.
pub(super) fn hold(s: &QuorumSetup, w: &mut QWorld, c: usize, until: i64, token: i64) {
    let now = w.now;
    if token > 0 {
        let h = &mut w.history;
        if h.accepted.iter().any(|&t| t >= token) {
            h.token_went_back = true;
        }
        h.accepted.push(token);
    }
    let crashed = w.history.crashed;
    let cl = &mut w.clients[c];
    cl.taken += 1;
    cl.taken_after_crash |= crashed;
    cl.heard = 0;
    cl.phase = QPhase::Holding {
        until,
        token,
        release_at: now + s.hold,
        written: false,
        proclaimed: false,
        proclaim_at: now,
    };
}

/// A proclaim round.
pub(super) fn proclaim(s: &QuorumSetup, w: &mut QWorld, c: usize, exact: i64, left: u8) {
    let QPhase::Holding { token, .. } = w.clients[c].phase else {
        return;
    };
    let id = request_id(w, c);
    let cl = &w.clients[c];
    let argv = vec![
        id,
        cl.value(),
        t(token),
        format!("c{c}"),
        t(s.retention),
        t("-"),
        t(cl.known_term),
        t(exact),
        t("n"),
    ];
    let k = vec![
        keys::LOCK,
        keys::FENCE,
        keys::LEADER,
        keys::TERMS,
        keys::CHAN,
    ];
    send(
        w,
        c,
        Step::Proclaim { exact, left },
        ("LEADER_PROCLAIM", k, argv),
        None,
    );
}

/// Belief ends, then the release goes to every master (its answer is not waited for: the
/// client's later requests to each master follow it there); the next acquisition.
pub(super) fn release(s: &QuorumSetup, w: &mut QWorld, c: usize) {
    let id = request_id(w, c);
    let value = w.clients[c].value();
    let req = (
        "RELEASE",
        vec![keys::LOCK, keys::CHAN],
        vec![value, id, t(0), t("-")],
    );
    send(w, c, Step::Untaken { busy: None }, req, None);
    let cl = &mut w.clients[c];
    cl.call = None;
    cl.round += 1;
    cl.heard = 0;
    cl.phase = if cl.round >= s.rounds {
        QPhase::Done
    } else {
        QPhase::Idle
    };
}

/// Client `c` does what is due.
pub(super) fn act(s: &QuorumSetup, w: &mut QWorld, c: usize) {
    let now = w.now;
    match w.clients[c].phase.clone() {
        QPhase::Idle => {
            w.clients[c].phase = QPhase::Waiting {
                started: now,
                next_at: Some(now),
                queued: false,
            };
            attempt(s, w, c);
        }
        QPhase::Waiting { started, .. } if now >= started + s.wait => {
            let cl = &mut w.clients[c];
            cl.round += 1;
            cl.heard = 0;
            cl.phase = if cl.round >= s.rounds {
                QPhase::Done
            } else {
                QPhase::Idle
            };
        }
        QPhase::Waiting { .. } => attempt(s, w, c),
        QPhase::Holding {
            token,
            release_at,
            written,
            proclaimed,
            proclaim_at,
            ..
        } => {
            if s.leader && !proclaimed && proclaim_at <= now {
                proclaim(s, w, c, 0, s.agreement_rounds.saturating_sub(1));
            } else if s.fenced && !written {
                // The body's fenced write comes before its release (late, as a zombie's may:
                // a pause between the take and the write).
                if let QPhase::Holding { written, .. } = &mut w.clients[c].phase {
                    *written = true;
                }
                let argv = [t("set"), t("l"), t(token), t(0), format!("v{c}")];
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                let ran = scripts::run(
                    "FENCED_WRITE",
                    &mut w.store,
                    now * 1000,
                    &[DATA, MARK],
                    &argv,
                    &s.mutations,
                );
                if ran.reply == Reply::Int(1) {
                    if token < w.history.max_landed {
                        w.history.stale_write_landed = true;
                    }
                    w.history.max_landed = w.history.max_landed.max(token);
                }
            } else if release_at <= now {
                release(s, w, c);
            }
        }
        QPhase::Done => {}
    }
}

/// An acquire attempt: `ACQUIRE_QUEUED` on every master, ticketed (the acquire's start),
/// queued once subscribed.
fn attempt(s: &QuorumSetup, w: &mut QWorld, c: usize) {
    let QPhase::Waiting {
        started, queued, ..
    } = w.clients[c].phase
    else {
        return;
    };
    if let QPhase::Waiting { next_at, .. } = &mut w.clients[c].phase {
        *next_at = None;
    }
    w.clients[c].heard = 0;
    let id = request_id(w, c);
    let retention = if s.fenced { s.retention } else { 0 };
    let ticket = started * 1000 + c as i64 + 1;
    let argv = vec![
        w.clients[c].value(),
        t(s.ttl),
        t(retention),
        id,
        t(ticket),
        t(s.grace),
        t(if queued { "1" } else { "0" }),
    ];
    let k = vec![keys::LOCK, keys::FENCE, keys::QUEUE, keys::UNTIL];
    send(w, c, Step::Attempt, ("ACQUIRE_QUEUED", k, argv), None);
}
