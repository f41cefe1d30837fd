//! RedLock in the protocol model: clients taking one lock over a quorum of independent masters
//! (`Config::redlock`), each master its own keyspace running the scripts' model, as
//! `deploy/redlock` and `deploy/redlock/token` run them.
//!
//! **A call** goes to every master (a request per master, in order per client and master, as
//! `stragglers` keeps them) and counts by majority as soon as its outcome cannot change
//! (`deploy/redlock/count/`, [`count`]): which majority decides is the order the masters
//! apply the requests in, every interleaving of the two clients' requests included. A request
//! is applied before time passes unless it is slow ([`QAct::Slow`], a budget): then it may be
//! applied any time later, and the call, if the slow master's answer is all it waits for, may
//! give it up ([`QAct::TimeOut`]: the response timeout).
//!
//! **Clients** run `lock::wait_loop` over a quorum: an attempt is `ACQUIRE_QUEUED` (ticketed,
//! queued on the masters from its second attempt), taken by a majority within the validity
//! time; an attempt that did not take the lock releases what a minority granted before it
//! waits (`Kind::releases_untaken`); a waiter looks again at the pttl, or when release messages
//! came from enough masters (`wake_after`). A fenced take then runs the token rounds of
//! `deploy/redlock/token.rs`: read a majority's floors (`FENCE_FLOOR`), take a token above them and the
//! take's own, raise a majority's floors to it (a raise that finds a floor at or above it
//! tries again `ahead` higher), all within the lease's validity. A leader proclaims its term on
//! every master and counts it as `deploy/redlock/count/leader.rs` does: a term counts once a
//! majority wrote that very term, otherwise another round with it as `exact`.
//!
//! **Faults**: masters' clocks differ ([`QuorumSetup::skew`]); a master goes down, its
//! keyspace lost, and restarts empty after `restart_after` (more than a ttl, as RedLock asks
//! of a master without persistence); a client pauses; a request is slow.

mod arrive;
mod client;
pub mod count;
mod settle;
mod world;

use stateright::{Model, Property};

use crate::keyspace::Keyspace;

pub use world::{
    keys, Answer, Master, Pending, QAct, QClient, QHistory, QPhase, QWorld, QuorumBugs,
    QuorumSetup, Step,
};

/// The RedLock model: a [`QuorumSetup`].
#[derive(Clone, Debug)]
pub struct Quorum(pub QuorumSetup);

impl Quorum {
    /// The clients whose `ensure_held` is `Ok` at `now`.
    pub fn believers(&self, w: &QWorld) -> Vec<usize> {
        (0..w.clients.len())
            .filter(|&c| w.clients[c].believes(w.now))
            .collect()
    }
}

impl Model for Quorum {
    type State = QWorld;
    type Action = QAct;

    fn init_states(&self) -> Vec<QWorld> {
        let s = &self.0;
        vec![QWorld {
            now: 0,
            masters: (0..s.masters)
                .map(|_| Master {
                    ks: Keyspace::new(),
                    up: true,
                    back_at: 0,
                })
                .collect(),
            clients: (0..s.clients).map(|c| QClient::new(c, s.masters)).collect(),
            store: Keyspace::new(),
            pauses: s.pauses,
            slow: s.slow,
            crashes: s.crashes,
            history: QHistory::default(),
        }]
    }

    fn actions(&self, w: &QWorld, acts: &mut Vec<QAct>) {
        let s = &self.0;
        let mut forced = false;
        for (c, client) in w.clients.iter().enumerate() {
            let mut fresh = false;
            for (m, queue) in client.out.iter().enumerate() {
                match queue.first() {
                    Some(p) if p.slow => acts.push(QAct::Deliver(c, m)),
                    Some(_) => {
                        fresh = true;
                        if w.slow > 0 {
                            acts.push(QAct::Slow(c, m));
                        }
                    }
                    None => {}
                }
            }
            if fresh {
                forced = true;
                acts.push(QAct::Call(c, None));
                if !client.paused {
                    for m in client.answering() {
                        acts.push(QAct::Call(c, Some(m)));
                    }
                }
            }
            if client.paused {
                acts.push(QAct::Resume(c));
                continue;
            }
            if client.waits_for_slow_only() {
                acts.push(QAct::TimeOut(c));
            }
            if client.call.is_none() && client.due(s, w.now) {
                acts.push(QAct::Act(c));
                forced |= client.forced(s, w.now);
            }
            if w.pauses > 0 {
                acts.push(QAct::Pause(c));
            }
        }
        // A master goes down between the clients' steps (a crash amid a call's deliveries
        // comes to the same: the requests it applied before were answered, the rest fail).
        if !forced && w.crashes > 0 && w.masters.iter().all(|m| m.up) {
            for m in 0..w.masters.len() {
                acts.push(QAct::Crash(m));
            }
        }
        if !forced && w.now < s.horizon {
            acts.push(QAct::Tick);
        }
    }

    fn next_state(&self, w: &QWorld, act: QAct) -> Option<QWorld> {
        let s = &self.0;
        let mut w = w.clone();
        match act {
            QAct::Tick => {
                w.now += 1;
                for (m, master) in w.masters.iter_mut().enumerate() {
                    if !master.up && w.now >= master.back_at {
                        master.up = true;
                    }
                    master.ks.purge(s.clock(m, w.now));
                }
                w.store.purge(w.now);
            }
            QAct::Act(c) => client::act(s, &mut w, c),
            QAct::Call(c, late) => arrive::flush(s, &mut w, c, late),
            QAct::Deliver(c, m) => arrive::deliver(s, &mut w, c, m),
            QAct::Slow(c, m) => {
                w.slow -= 1;
                if let Some(p) = w.clients[c].out[m].first_mut() {
                    p.slow = true;
                }
            }
            QAct::TimeOut(c) => arrive::time_out(s, &mut w, c),
            QAct::Pause(c) => {
                w.pauses -= 1;
                w.clients[c].paused = true;
            }
            QAct::Resume(c) => {
                w.clients[c].paused = false;
                settle::settle(s, &mut w, c);
            }
            QAct::Crash(m) => {
                w.crashes -= 1;
                w.history.crashed = true;
                let master = &mut w.masters[m];
                master.ks = Keyspace::new();
                master.up = false;
                master.back_at = w.now + s.restart_after;
                arrive::master_down(s, &mut w, m);
            }
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |m: &Quorum, w: &QWorld| {
                m.believers(w).len() <= 1
            }),
            Property::always("tokens rise", |_, w: &QWorld| !w.history.token_went_back),
            Property::always("terms rise", |_, w: &QWorld| !w.history.term_went_back),
            Property::always("no stale write lands", |_, w: &QWorld| {
                !w.history.stale_write_landed
            }),
            Property::sometimes("two holds in turn", |_, w: &QWorld| {
                w.clients.iter().filter(|c| c.taken > 0).count() >= 2
            }),
            Property::sometimes("a hold after a master went down", |_, w: &QWorld| {
                w.history.crashed && w.clients.iter().any(|c| c.taken_after_crash)
            }),
            Property::sometimes("a raise lost", |_, w: &QWorld| w.history.raise_lost),
        ]
    }

    fn within_boundary(&self, w: &QWorld) -> bool {
        w.now <= self.0.horizon
    }
}
