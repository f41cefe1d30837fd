//! RedLock in the protocol model: clients taking one lock over a quorum of independent masters
//! (`Config::redlock`), each master its own keyspace running the scripts' model, as
//! `deploy/redlock` and `lock/quorum_token` run them.
//!
//! **A call** goes to every master (a request per master, in order per client and master, as
//! `stragglers` keeps them) and counts by majority as soon as its outcome cannot change
//! (`deploy/redlock/quorum.rs`, [`count`]): which majority decides is the order the masters
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
//! `lock/quorum_token.rs`: read a majority's floors (`FENCE_FLOOR`), take a token above them and the
//! take's own, raise a majority's floors to it (a raise that finds a floor at or above it
//! tries again `ahead` higher), all within the lease's validity. A leader proclaims its term on
//! every master and counts it as `deploy/redlock/leader.rs` does: a term counts once a
//! majority wrote that very term, otherwise another round with it as `exact`.
//!
//! **Faults**: masters' clocks differ ([`QuorumSetup::skew`]); a master goes down, its
//! keyspace lost, and restarts empty after `restart_after` (more than a ttl, as RedLock asks
//! of a master without persistence); a client pauses; a request is slow.

mod client;
pub mod count;
mod settle;

use stateright::{Model, Property};

use crate::keyspace::Keyspace;
use crate::scripts::{Mutations, Reply};

pub use client::{Answer, Pending, QClient, QPhase, Step};

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

/// Seeded bugs of the quorum's client (the runtime's `lock/quorum_token.rs`, `deploy/redlock`), each
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

/// The RedLock model: a [`QuorumSetup`].
#[derive(Clone, Debug)]
pub struct Quorum(pub QuorumSetup);

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
            QAct::Call(c, late) => client::flush(s, &mut w, c, late),
            QAct::Deliver(c, m) => client::deliver(s, &mut w, c, m),
            QAct::Slow(c, m) => {
                w.slow -= 1;
                if let Some(p) = w.clients[c].out[m].first_mut() {
                    p.slow = true;
                }
            }
            QAct::TimeOut(c) => client::time_out(s, &mut w, c),
            QAct::Pause(c) => {
                w.pauses -= 1;
                w.clients[c].paused = true;
            }
            QAct::Resume(c) => {
                w.clients[c].paused = false;
                client::settle(s, &mut w, c);
            }
            QAct::Crash(m) => {
                w.crashes -= 1;
                w.history.crashed = true;
                let master = &mut w.masters[m];
                master.ks = Keyspace::new();
                master.up = false;
                master.back_at = w.now + s.restart_after;
                client::master_down(s, &mut w, m);
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

/// `{id, {a, b, ...}}`'s inner integers, or `{id, n}`'s `n`.
pub(crate) fn inner(reply: &Reply) -> Vec<i64> {
    super::inner(reply)
}
