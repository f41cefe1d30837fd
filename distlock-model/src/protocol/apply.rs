//! The server's side of a client's request: its script applied, what it published heard by
//! the waiters subscribed, and what the step did checked against the history (`fifo`, `no
//! waiter stranded`, tokens and terms, the dead waiters' toll).

use crate::scripts::Reply;

use super::phase::{Phase, Req};
use super::requests::{role, ticket, Role};
use super::{inner, liveness, Setup, World};

/// The server applies client `c`'s request: its reply is on the way, what it published is
/// heard by the waiters subscribed, and what the step did is checked against the history.
pub(crate) fn apply(s: &Setup, w: &mut World, c: usize) {
    let Some(f) = w.clients[c].inflight.as_mut() else {
        return;
    };
    let Some(call) = f.call.take() else { return };
    let req = f.req.clone();
    // Held by someone: a holder's string or a set's live members (a writer's release that
    // hands the lock to readers turns one into the other and lets nothing go; a set whose
    // last member's deadline passed was freed by time, not by the script that removes it).
    let holders = w.server.holders(w.now);
    let line_before = w.server.queue_len(w.now) > 0;
    let queue_before = w.server.queue(w.now);
    let ran = w
        .server
        .run(w.now, call.script, &call.keys, &call.argv, &s.mutations);
    let now_holding = w.server.holders(w.now);
    if !holders.is_empty() && now_holding.is_empty() && w.server.queue_len(w.now) > 0 {
        // A hold taken blind past the line was never marked: its release cannot know of the
        // line, whose waiters look again at the expiry that let the newcomer in.
        let past_line = w.history.taken_past_line.as_ref();
        if holders.len() != 1 || past_line != Some(&holders[0]) {
            w.history.left_free = true;
        }
    }
    // Every hold the step gave (a take, or grants: a release hands a lock, permits, or a
    // share to each reader at the head of the line), each checked against the line.
    // A newcomer's own first attempt, one that does not look at the line (`SET NX`, a lock's
    // fenced acquire, a permit's): a reader's first attempt serves the line first, so it is
    // held to the line at any time, and what an attempt hands the line on its way is a grant.
    let blind = req == (Req::Attempt { queued: false }) && role(s, c) != Role::Reader;
    let mine = w.clients[c].value();
    if blind && line_before && now_holding.contains(&mine) && !holders.contains(&mine) {
        w.history.taken_past_line = Some(mine.clone());
    }
    for new in now_holding.iter().filter(|h| !holders.contains(h)) {
        if passes(s, w, new) {
            if blind && *new == mine && w.history.freed_by_expiry {
                w.history.barged = true;
            } else {
                w.history.passed = true;
            }
        }
    }
    if holders != now_holding {
        w.history.freed_by_expiry = false;
    }
    // A live client's release let its hold go: the waiters behind dead ones are owed it.
    if req == Req::Release && holders.contains(&mine) && !now_holding.contains(&mine) {
        liveness::let_go(s, w, &queue_before);
    }
    // Tokens are compared in the order the server hands them out (their replies may arrive
    // in another order), once their holder accepts them (a token of a take that no replica
    // acknowledged is never handed to the caller).
    if let (Req::Attempt { .. }, [1, token, ..]) = (&req, inner(&ran.reply).as_slice()) {
        if s.fenced && *token > 0 {
            w.history.issued += 1;
        }
    }
    if req == Req::Proclaim {
        let items = ran
            .reply
            .items()
            .get(1)
            .map(|r| r.items().to_vec())
            .unwrap_or_default();
        if let (Some(Reply::Int(1)), Some(Reply::Bulk(term))) = (items.first(), items.get(1)) {
            let term = term.parse::<i64>().unwrap_or(0);
            if term <= w.history.max_term {
                w.history.term_went_back = true;
            }
            w.history.max_term = w.history.max_term.max(term);
        }
    }
    for (_, msg) in &ran.published {
        for other in w.clients.iter_mut() {
            if matches!(other.phase, Phase::Waiting { queued: true, .. }) {
                other.inbox.push(msg.clone());
            }
        }
    }
    let (seq, epoch, issued) = (w.server.seq, w.server.epoch, w.history.issued);
    if let Some(f) = w.clients[c].inflight.as_mut() {
        f.reply = ran.reply;
        f.seq = seq;
        f.epoch = epoch;
        f.issued = issued;
    }
}

/// Whether the hold just taken by (or handed to) `holder` passed a waiter queued in Redis
/// before it whose hold conflicts with it: one with a lower ticket still in the queue, of a
/// kind that cannot hold with it (a lock's holder, a permit's: any other; a reader: a writer;
/// a writer: anyone). Readers passing readers is no conflict: they hold together.
fn passes(st: &Setup, w: &World, holder: &str) -> bool {
    let Some(taker) = w.clients.iter().find(|c| c.value() == holder) else {
        return false;
    };
    let Phase::Waiting { started, .. } = taker.phase else {
        return false;
    };
    let mine = ticket(st, started);
    let reads = |c: usize| role(st, c) == Role::Reader;
    w.clients.iter().any(|other| {
        other.id != taker.id
            && !(reads(taker.id) && reads(other.id))
            && matches!(other.phase, Phase::Waiting { queued: true, .. })
            && w.server
                .queued(w.now, &other.value())
                .is_some_and(|t| t < mine)
    })
}
