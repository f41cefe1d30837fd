//! What reaches a quorum client from the masters, and when: each master applies the client's
//! requests (fast ones at once, a slow one late), a call times out, a master goes down; then
//! the client counts its call's answers ([`super::settle`]).

use crate::scripts;

use super::settle::{settle, settle_with};
use super::world::{Answer, QPhase, QWorld, QuorumSetup};

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
