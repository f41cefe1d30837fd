//! How a quorum client counts its call's answers (by [`super::count`]) once they decide the
//! call, and what it does next: the token rounds after a take, the release of a minority's
//! grants, the proclaim's rounds.

use super::client::{
    after_untaken, fail, hold, proclaim, raise, release, request_id, send, untaken,
};
use super::count::{self, Acquired, Outcome, Proclaimed};
use super::world::{inner, keys, t, Answer, InCall, QPhase, QWorld, QuorumSetup, Step};

/// Client `c` counts its call's answers, if it is running and they decide it.
pub(crate) fn settle(s: &QuorumSetup, w: &mut QWorld, c: usize) {
    settle_with(s, w, c, None);
}

/// [`settle`], with master `late`'s answer counted only if the others do not decide the call.
pub(super) fn settle_with(s: &QuorumSetup, w: &mut QWorld, c: usize, late: Option<usize>) {
    let cl = &w.clients[c];
    if cl.paused {
        return;
    }
    let Some(mut call) = cl.call.clone() else {
        return;
    };
    if let Some(m) = late {
        let mut early = call.clone();
        early.answers[m] = Answer::Out;
        if decides(s, w.now, &early) {
            call = early;
        }
    }
    let now = w.now;
    let majority = s.majority();
    let a = &call.answers;
    match call.step {
        Step::Attempt => {
            let required = if s.bugs.take_without_majority {
                1
            } else {
                majority
            };
            match count::acquired(a, required, now - call.sent, (s.ttl, s.margin)) {
                Outcome::Open => {}
                Outcome::Done(Acquired::Taken(token)) => {
                    w.clients[c].call = None;
                    if s.fenced {
                        let id = request_id(w, c);
                        let req = (
                            "FENCE_FLOOR",
                            vec![keys::FENCE],
                            vec![id, t(0), t(s.retention)],
                        );
                        let first = call
                            .answers
                            .iter()
                            .position(|a| match a {
                                Answer::Reply(r) => inner(r).first() == Some(&1),
                                _ => false,
                            })
                            .unwrap_or(0);
                        let step = Step::Floor {
                            taken: token,
                            acq_sent: call.sent,
                            first,
                        };
                        send(w, c, step, req, None);
                    } else {
                        hold(s, w, c, call.sent + s.ttl - s.margin, 0);
                    }
                }
                Outcome::Done(Acquired::Busy(pttl)) => untaken(s, w, c, &call, Some(pttl)),
                Outcome::NoQuorum => untaken(s, w, c, &call, None),
            }
        }
        Step::Untaken { busy } => match count::released(a, majority) {
            Outcome::Open => {}
            _ => {
                w.clients[c].call = None;
                after_untaken(s, w, c, busy);
            }
        },
        Step::Floor {
            taken,
            acq_sent,
            first,
        } => match count::floor(a, majority) {
            Outcome::Open => {}
            Outcome::Done(floor) => {
                w.clients[c].call = None;
                let round = (s.raises, acq_sent, first);
                raise(s, w, c, taken.max(floor) + 1, round);
            }
            Outcome::NoQuorum => fail(s, w, c),
        },
        Step::Raise {
            token,
            left,
            acq_sent,
            first,
        } => {
            let required = if s.bugs.raise_one_master { 1 } else { majority };
            match count::floor(a, required) {
                Outcome::Open => {}
                Outcome::Done(_) if now >= acq_sent + s.ttl - s.margin => fail(s, w, c),
                Outcome::Done(before) if before < token => {
                    w.clients[c].call = None;
                    hold(s, w, c, acq_sent + s.ttl - s.margin, token);
                }
                Outcome::Done(before) => {
                    w.history.raise_lost = true;
                    w.clients[c].call = None;
                    match left {
                        0 => fail(s, w, c),
                        _ => raise(s, w, c, before + s.ahead, (left - 1, acq_sent, first)),
                    }
                }
                Outcome::NoQuorum => fail(s, w, c),
            }
        }
        Step::Proclaim { left, exact } => {
            match count::proclaimed_exact(a, majority, exact) {
                Outcome::Open => {}
                Outcome::Done(Proclaimed::Agreed(term)) => {
                    w.clients[c].call = None;
                    // A term counted after the lease ran out (its answers came late: a pause
                    // or a slow master) leads nothing: `campaign` returns its `Leadership`
                    // already lost, `ensure_held` failing, while a later leader may have
                    // counted a higher term. The terms that must rise are those counted while
                    // the lease is believed.
                    if w.clients[c].believes(now) {
                        if term <= w.history.max_term {
                            w.history.term_went_back = true;
                        }
                        w.history.max_term = w.history.max_term.max(term);
                    }
                    let cl = &mut w.clients[c];
                    cl.known_term = cl.known_term.max(term);
                    if let QPhase::Holding { proclaimed, .. } = &mut cl.phase {
                        *proclaimed = true;
                    }
                }
                Outcome::Done(Proclaimed::Again(top)) if left > 0 => {
                    w.clients[c].call = None;
                    proclaim(s, w, c, top, left - 1);
                }
                // Lost, or no agreement: campaign again (the hold is released).
                Outcome::Done(_) => {
                    w.clients[c].call = None;
                    release(s, w, c);
                }
                // Transient: again at the next tick, while the lease is believed.
                Outcome::NoQuorum => {
                    w.clients[c].call = None;
                    if let QPhase::Holding { proclaim_at, .. } = &mut w.clients[c].phase {
                        *proclaim_at = now + 1;
                    }
                    if !w.clients[c].believes(now) {
                        release(s, w, c);
                    }
                }
            }
        }
    }
}

/// Whether `call`'s answers decide it (at `now`).
fn decides(s: &QuorumSetup, now: i64, call: &InCall) -> bool {
    let a = &call.answers;
    let majority = s.majority();
    let open = |o: bool| !o;
    match call.step {
        Step::Attempt => {
            let required = if s.bugs.take_without_majority {
                1
            } else {
                majority
            };
            open(count::acquired(a, required, now - call.sent, (s.ttl, s.margin)) == Outcome::Open)
        }
        Step::Untaken { .. } => open(count::released(a, majority) == Outcome::Open),
        Step::Floor { .. } => open(count::floor(a, majority) == Outcome::Open),
        Step::Raise { .. } => {
            let required = if s.bugs.raise_one_master { 1 } else { majority };
            open(count::floor(a, required) == Outcome::Open)
        }
        Step::Proclaim { exact, .. } => {
            open(count::proclaimed_exact(a, majority, exact) == Outcome::Open)
        }
    }
}
