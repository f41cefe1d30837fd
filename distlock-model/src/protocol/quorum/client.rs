//! A client of the quorum: `lock::wait_loop`'s loop over RedLock, `deploy/redlock/token.rs`'s token rounds
//! and `leader/leadership.rs`'s proclaim agreement, each call sent to every master and counted
//! by [`super::count`].

use crate::protocol::server::keys::{DATA, MARK};
use crate::scripts::{self, Reply};

use super::world::{inner, keys, t, Answer, InCall, Pending, QPhase, QWorld, QuorumSetup, Step};

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
        Answer::Reply(r) => inner(r).first() == Some(&1),
        _ => true,
    });
    if !granted {
        return after_untaken(s, w, c, busy);
    }
    send_release(w, c, busy);
}

/// Client `c`'s `RELEASE` of its value to every master (`busy`: the pttl an untaken attempt
/// found, for the wait after it).
fn send_release(w: &mut QWorld, c: usize, busy: Option<i64>) {
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
    send_release(w, c, None);
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
    let life = (started + s.wait - w.now).min(s.lapse).max(1);
    let argv = vec![
        w.clients[c].value(),
        t(s.ttl),
        t(retention),
        id,
        t(ticket),
        t(s.grace),
        t(if queued { "1" } else { "0" }),
        t(life),
    ];
    let k = vec![keys::LOCK, keys::FENCE, keys::QUEUE, keys::UNTIL];
    send(w, c, Step::Attempt, ("ACQUIRE_QUEUED", k, argv), None);
}
