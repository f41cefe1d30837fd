//! A modelled client: one acquire at a time, as `lock::wait_loop` runs it (a first attempt that
//! takes a free lock, then queued attempts that a release may answer with a grant), a hold
//! kept as `lease.rs` keeps it (renewed by the watchdog, ended by a release or a loss), the
//! leader's proclaim, and a fenced write.

use crate::scripts::Reply;

use super::apply::apply;
use super::phase::{Entered, Phase, Req};
use super::requests::{self, confirms, Carried};
use super::server::keys;
use super::{inner, Setup, World};

/// A script call on its way to the server (a slow request: [`super::Act::Apply`] applies
/// it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    /// The script.
    pub script: &'static str,
    /// Its keys.
    pub keys: Vec<&'static str>,
    /// Its arguments.
    pub argv: Vec<String>,
}

/// A request sent: on its way to the server, or applied there with its reply on the way.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Inflight {
    /// What it was.
    pub req: Req,
    /// Its request id.
    pub id: u8,
    /// When it was sent.
    pub sent: i64,
    /// Not applied yet (a slow request).
    pub call: Option<Call>,
    /// The reply (`Nil` until applied).
    pub reply: Reply,
    /// The primary's write count after it (for `WAIT`).
    pub seq: u8,
    /// The failover epoch it was applied in.
    pub epoch: u8,
    /// Tokens the server had handed out when it was applied (its own included).
    pub issued: u8,
}

/// A client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its number.
    pub id: usize,
    /// Acquisitions started.
    pub round: u8,
    /// Holds taken.
    pub taken: u8,
    /// Where it is.
    pub phase: Phase,
    /// Its request in flight.
    pub inflight: Option<Inflight>,
    /// Messages heard on the release channel, not handled yet.
    pub inbox: Vec<String>,
    /// Paused.
    pub paused: bool,
    /// Requests sent.
    pub requests: u8,
    /// The highest term it has seen.
    pub known_term: i64,
    /// Its lease clock's rate, in % of the server's ([`Setup::drift`]).
    pub rate: i64,
    /// Its process (`client_of` its values: [`Setup::siblings`]).
    pub process: usize,
    /// Crashed ([`super::Act::Crash`]): when its queue entry lapses (the last look that
    /// queued it plus the life it sent; `i64::MAX`: it had none). A crashed client never acts.
    pub dead: Option<i64>,
}

impl Client {
    pub(super) fn new(id: usize, process: usize) -> Client {
        Client {
            id,
            round: 0,
            taken: 0,
            phase: Phase::Idle,
            inflight: None,
            inbox: Vec::new(),
            paused: false,
            requests: 0,
            known_term: 0,
            rate: 100,
            process,
            dead: None,
        }
    }

    /// When a lease of `length` ms by its own clock, counted from `base`, ends in real time:
    /// believed while `(now - base) * rate < length * 100`, so until the first whole ms at
    /// which that fails.
    pub fn lease_end(&self, base: i64, length: i64) -> i64 {
        base + ceil_div(length * 100, self.rate)
    }

    /// `ms` by its own clock from `now`, in real time (its timers).
    fn after(&self, now: i64, ms: i64) -> i64 {
        now + ceil_div(ms * 100, self.rate)
    }

    /// The lock value of its current acquisition.
    pub fn value(&self) -> String {
        format!("d2:p{}:c{}r{}", self.process, self.id, self.round)
    }

    fn request_id(&mut self) -> (u8, String) {
        self.requests += 1;
        (self.requests, format!("c{}q{}", self.id, self.requests))
    }

    /// Whether `ensure_held` is `Ok` at `now`.
    pub fn believes(&self, now: i64) -> bool {
        match self.phase {
            Phase::Holding { until, .. } => now < until,
            Phase::Releasing { until: Some(until) } => now < until,
            _ => false,
        }
    }

    /// Something is due that the client must do before time passes.
    pub(super) fn due(&self, s: &Setup, now: i64) -> bool {
        match &self.phase {
            Phase::Idle => self.round < s.rounds,
            Phase::Waiting {
                next_at, started, ..
            } => next_at.is_some_and(|at| at <= now) || now >= started + s.wait,
            Phase::Holding {
                renew_at,
                release_at,
                proclaimed,
                written,
                entered,
                ..
            } => {
                (s.leader && !proclaimed)
                    || renew_at.is_some_and(|at| at <= now)
                    || *release_at <= now
                    || (s.fenced && !written)
                    || (s.reentry && *entered != Entered::Exited)
            }
            Phase::Releasing { .. } | Phase::Done => false,
        }
    }

    /// Would what is due send a request (an attempt, a renewal, a release, a proclaim)?
    pub(super) fn sends(&self, s: &Setup, now: i64) -> bool {
        match &self.phase {
            Phase::Waiting {
                started, queued, ..
            } => *queued || now < started + s.wait,
            Phase::Holding {
                renew_at,
                release_at,
                proclaimed,
                entered,
                ..
            } => {
                (s.leader && !proclaimed)
                    || renew_at.is_some_and(|at| at <= now)
                    || *release_at <= now
                    || (s.reentry && *entered == Entered::Not)
                    || (s.bugs.release_at_first_exit && *entered == Entered::Inside)
            }
            _ => false,
        }
    }

    /// Must it act before time passes (an acquire may start at any time; a fenced write may
    /// come late, as a zombie's does)?
    pub(super) fn forced(&self, s: &Setup, now: i64) -> bool {
        match &self.phase {
            Phase::Idle => false,
            Phase::Holding {
                renew_at,
                release_at,
                proclaimed,
                ..
            } => {
                (s.leader && !proclaimed)
                    || renew_at.is_some_and(|at| at <= now)
                    || *release_at <= now
            }
            _ => self.due(s, now),
        }
    }
}

/// Sends a lock script for client `c`: applied at once, or (a slow request, when the step is
/// [`super::Act::ActSlow`]) left on its way until [`apply`].
fn send(
    s: &Setup,
    w: &mut World,
    c: usize,
    req: Req,
    script: &'static str,
    k: &[&'static str],
    argv: Vec<String>,
) {
    let id = w.clients[c].requests;
    w.clients[c].inflight = Some(Inflight {
        req,
        id,
        sent: w.now,
        call: Some(Call {
            script,
            keys: k.to_vec(),
            argv,
        }),
        reply: Reply::Nil,
        seq: 0,
        epoch: 0,
        issued: 0,
    });
    if w.slow {
        w.slow = false;
        w.pauses -= 1;
    } else {
        apply(s, w, c);
    }
}

/// The waiter a release by client `c` carries (`NextWaiter`, `client::waiting::cohort`): the
/// first (by ticket) other waiter of its process for the lock, queued, alive; with the
/// request its grant will name (its last queued attempt's, so it trusts the grant from that
/// attempt's send, before the release's) and its entry's life. Only a plain lock's release.
fn carried(st: &Setup, w: &World, c: usize) -> Option<Carried> {
    let me = &w.clients[c];
    if st.siblings < 2 || requests::role(st, c) != requests::Role::Writer(&requests::L) {
        return None;
    }
    w.clients
        .iter()
        .filter(|o| o.id != c && o.process == me.process && o.dead.is_none())
        .filter_map(|o| match o.phase {
            Phase::Waiting {
                started,
                queued: true,
                last_busy: Some((id, _, _)),
                ..
            } => Some((requests::ticket(st, started), o, id, started)),
            _ => None,
        })
        .min_by_key(|(t, o, _, _)| (*t, o.value()))
        .map(|(t, o, id, started)| {
            let life = requests::life(st, started, w.now);
            (o.value(), t, format!("c{}q{id}", o.id), life)
        })
}

/// Client `c`'s process died: it never acts again; its queue entry lapses at its last look
/// plus the life it sent (`Client::dead`).
pub(super) fn crash(st: &Setup, w: &mut World, c: usize) {
    let cl = &mut w.clients[c];
    let mut lapse = i64::MAX;
    if let Phase::Waiting {
        started,
        queued: true,
        last_busy,
        ..
    } = cl.phase
    {
        let applied = cl
            .inflight
            .as_ref()
            .filter(|f| f.req == (Req::Attempt { queued: true }) && f.call.is_none())
            .map(|f| f.sent);
        let looked = applied.or(last_busy.map(|(_, sent, _)| sent));
        if let Some(sent) = looked {
            lapse = sent + requests::life(st, started, sent);
        }
    }
    cl.dead = Some(lapse);
    cl.phase = Phase::Done;
    cl.inflight = None;
    cl.inbox.clear();
    cl.paused = false;
}

/// `a / b` rounded up (`b > 0`).
fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// Client `c` does what is due.
pub(super) fn act(st: &Setup, w: &mut World, c: usize) {
    let now = w.now;
    let cl = &mut w.clients[c];
    let value = cl.value();
    match cl.phase.clone() {
        Phase::Idle => {
            cl.phase = Phase::Waiting {
                started: now,
                next_at: Some(now),
                queued: false,
                last_busy: None,
            };
        }
        Phase::Waiting {
            started, queued, ..
        } if now >= started + st.wait => {
            cl.phase = Phase::Idle;
            cl.round += 1;
            cl.inbox.clear();
            if cl.round >= st.rounds {
                cl.phase = Phase::Done;
            }
            if queued {
                let (_, id) = cl.request_id();
                let (script, k, argv) = requests::leave(st, c, (value, id));
                send(st, w, c, Req::Leave, script, &k, argv);
            }
        }
        Phase::Waiting {
            started, queued, ..
        } => {
            let (_, id) = cl.request_id();
            let req = Req::Attempt { queued };
            let (script, k, argv) = requests::attempt(st, c, (value, id), (started, now), queued);
            send(st, w, c, req, script, &k, argv);
        }
        Phase::Holding {
            until,
            token,
            renew_at,
            release_at,
            written,
            proclaimed,
            entered,
        } => {
            if st.leader && !proclaimed {
                let (_, id) = cl.request_id();
                let known = cl.known_term;
                let (script, k, argv) = requests::proclaim(st, c, (value, id), token, known);
                send(st, w, c, Req::Proclaim, script, &k, argv);
            } else if renew_at.is_some_and(|at| at <= now) {
                if now >= until {
                    // The watchdog finds the lease lost before it renews (`collect`).
                    return next_round(st, w, c);
                }
                let (_, id) = cl.request_id();
                let (script, k, argv) = requests::renew(st, c, (value, id));
                send(st, w, c, Req::Renew, script, &k, argv);
            } else if entered == Entered::Inside {
                // The inner hold exits first (its body is inside the outer's): one hold less
                // counted, nothing sent, unless the bug releases the lock at the first exit.
                if let Phase::Holding { entered, .. } = &mut cl.phase {
                    *entered = Entered::Exited;
                }
                if st.bugs.release_at_first_exit {
                    let (_, id) = cl.request_id();
                    let (script, k, argv) = requests::release(st, c, (value, id), None);
                    send(st, w, c, Req::Release, script, &k, argv);
                }
            } else if release_at <= now {
                let (_, id) = cl.request_id();
                let kept = st.bugs.belief_after_release.then_some(until);
                cl.phase = Phase::Releasing { until: kept };
                let next = carried(st, w, c);
                let (script, k, argv) = requests::release(st, c, (value, id), next);
                send(st, w, c, Req::Release, script, &k, argv);
            } else if st.reentry && entered == Entered::Not {
                // The re-entry's one round trip: the hold still its own, its expiry extended.
                let (_, id) = cl.request_id();
                let (script, k, argv) = requests::renew(st, c, (value, id));
                send(st, w, c, Req::Reenter, script, &k, argv);
            } else if st.fenced && !written {
                if let Phase::Holding { written, .. } = &mut cl.phase {
                    *written = true;
                }
                let argv = vec![s("set"), s("l"), s(token), s(0), format!("v{c}")];
                let ran = w
                    .server
                    .write(now, &[keys::DATA, keys::MARK], &argv, &st.mutations);
                if ran.reply == Reply::Int(1) {
                    if token < w.history.max_landed {
                        w.history.stale_write_landed = true;
                    }
                    w.history.max_landed = w.history.max_landed.max(token);
                }
            }
        }
        Phase::Releasing { .. } | Phase::Done => {}
    }
}

/// A holder accepts `token`, the `issued`-th the server handed out: every token accepted so
/// far must be below it if it was handed out before it, above it if after.
fn accept_token(w: &mut World, issued: u8, token: i64) {
    let h = &mut w.history;
    if h.accepted
        .iter()
        .any(|&(i, t)| (i < issued && t >= token) || (i > issued && t <= token))
    {
        h.token_went_back = true;
    }
    h.accepted.push((issued, token));
}

/// The hold is taken (by an attempt sent at `sent`, or handed over: `until` given).
fn taken(st: &Setup, w: &mut World, c: usize, token: i64, until: i64) {
    let now = w.now;
    let cl = &mut w.clients[c];
    cl.taken += 1;
    cl.inbox.clear();
    let renew_at = (st.renew > 0).then(|| cl.after(now, st.renew));
    cl.phase = Phase::Holding {
        until,
        token,
        renew_at,
        release_at: now + st.hold,
        written: false,
        proclaimed: false,
        entered: Entered::Not,
    };
}

/// The hold is over (released, lost, or given up): the next acquisition, or done.
fn next_round(st: &Setup, w: &mut World, c: usize) {
    let cl = &mut w.clients[c];
    cl.round += 1;
    cl.inbox.clear();
    cl.phase = if cl.round >= st.rounds {
        Phase::Done
    } else {
        Phase::Idle
    };
}

/// Client `c` receives its reply.
pub(super) fn receive(st: &Setup, w: &mut World, c: usize) {
    let Some(f) = w.clients[c].inflight.take() else {
        return;
    };
    let now = w.now;
    let base = if st.bugs.lease_from_reply {
        now
    } else {
        f.sent
    };
    let acked = |w: &mut World| {
        !st.min_replicas || st.bugs.believe_before_replicas || w.server.acknowledge(f.seq, f.epoch)
    };
    match f.req {
        Req::Attempt { queued } => {
            let plain = matches!(&f.reply, Reply::Nil | Reply::Bulk(_) | Reply::Error(_));
            let (took, token, pttl) = match (&f.reply, queued && !plain) {
                (Reply::Nil, false) => (true, 0, 0),
                // Another holder, or readers (`WRONGTYPE`: the writer queues behind them).
                (Reply::Bulk(_) | Reply::Error(_), false) => (false, 0, 0),
                (r, _) => match inner(r).as_slice() {
                    [1, t, ..] => (true, *t, 0),
                    [_, p, ..] => (false, 0, *p),
                    _ => (false, 0, 0),
                },
            };
            if took {
                if !acked(w) {
                    // Unreplicated: the hold is let go, never believed.
                    let value = w.clients[c].value();
                    let (_, id) = w.clients[c].request_id();
                    w.clients[c].phase = Phase::Releasing { until: None };
                    let k = [keys::LOCK, keys::CHAN, keys::QUEUE, keys::IDS];
                    send(
                        st,
                        w,
                        c,
                        Req::Release,
                        "RELEASE",
                        &k,
                        vec![value, id, s(0), s("-")],
                    );
                    return;
                }
                let token = if st.fenced { token } else { 0 };
                if token > 0 {
                    accept_token(w, f.issued, token);
                }
                let until = w.clients[c].lease_end(base, st.ttl - st.margin);
                taken(st, w, c, token, until);
                return;
            }
            if let Phase::Waiting {
                started,
                next_at,
                queued: q,
                last_busy,
            } = &mut w.clients[c].phase
            {
                let give_up = *started + st.wait;
                if !*q {
                    *q = true;
                    *next_at = Some(now);
                    return;
                }
                *last_busy = Some((f.id, f.sent, now));
                let at = if st.bugs.no_recheck {
                    give_up
                } else {
                    (now + pttl.max(1)).min(now + st.recheck).min(give_up)
                };
                *next_at = Some(at);
            }
        }
        Req::Renew | Req::Reenter => {
            let statuses = inner(&f.reply);
            let ok = !statuses.is_empty() && statuses.iter().all(|&st| st == 1);
            let ok_acked = ok && acked(w);
            let renewed = w.clients[c].lease_end(base, st.ttl - st.margin);
            let next_renewal = w.clients[c].after(now, st.renew);
            if let Phase::Holding {
                until, renew_at, ..
            } = &mut w.clients[c].phase
            {
                if !ok {
                    w.clients[c].phase = Phase::Releasing { until: None };
                    next_round(st, w, c);
                    return;
                }
                if ok_acked {
                    *until = (*until).max(renewed);
                }
                if f.req == Req::Reenter {
                    // Not acknowledged by the replicas: the inner hold fails (`Unreplicated`),
                    // the outer stays as it was.
                    if let Phase::Holding { entered, .. } = &mut w.clients[c].phase {
                        *entered = match ok_acked {
                            true => Entered::Inside,
                            false => Entered::Exited,
                        };
                    }
                    return;
                }
                *renew_at = (st.renew > 0).then_some(next_renewal);
            }
        }
        Req::Release | Req::Leave => {
            if matches!(w.clients[c].phase, Phase::Releasing { .. }) {
                next_round(st, w, c);
            }
        }
        Req::Proclaim => {
            let items = f
                .reply
                .items()
                .get(1)
                .map(|r| r.items().to_vec())
                .unwrap_or_default();
            let term = match items.get(1) {
                Some(Reply::Bulk(t)) => t.parse::<i64>().unwrap_or(0),
                _ => 0,
            };
            if items.first() == Some(&Reply::Int(1)) {
                w.clients[c].known_term = term;
                if let Phase::Holding { proclaimed, .. } = &mut w.clients[c].phase {
                    *proclaimed = true;
                }
            } else {
                // Not our lock any more: the hold is lost.
                w.clients[c].phase = Phase::Releasing { until: None };
                next_round(st, w, c);
            }
        }
    }
}

/// Client `c` handles the next message on its release channel.
pub(super) fn hear(st: &Setup, w: &mut World, c: usize) {
    let now = w.now;
    let msg = w.clients[c].inbox.remove(0);
    let value = w.clients[c].value();
    let confirm = confirms(st, c);
    let Phase::Waiting {
        next_at, last_busy, ..
    } = w.clients[c].phase.clone()
    else {
        return;
    };
    let wake = |w: &mut World| {
        if let Phase::Waiting { next_at, .. } = &mut w.clients[c].phase {
            *next_at = Some(now);
        }
    };
    let Some(named) = msg.strip_prefix(&format!("{value} ")) else {
        if msg == "1" || msg == value {
            wake(w);
        }
        let _ = next_at;
        return;
    };
    if confirm {
        return wake(w);
    }
    let request = |id: u8| format!("c{c}q{id}");
    let from = match last_busy {
        Some((id, sent, _)) if named == request(id) || st.bugs.trust_any_grant => Some(sent),
        _ => None,
    };
    let Some(sent) = from else { return wake(w) };
    let base = if st.bugs.trust_grant_from_receipt {
        now
    } else {
        sent
    };
    // Trusted only with half the window left by its own clock.
    let length = st.window - st.margin;
    let rate = w.clients[c].rate;
    if 2 * (length * 100 - (now - base) * rate) < st.window * 100 {
        return wake(w);
    }
    let until = w.clients[c].lease_end(base, length);
    w.history.handed = true;
    taken(st, w, c, 0, until);
    // The watchdog extends a trusted grant to the ttl a third of the way through it.
    if let Phase::Holding { renew_at, .. } = &mut w.clients[c].phase {
        *renew_at = Some(now + (until - now) / 3);
    }
}
