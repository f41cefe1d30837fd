//! The protocol model: N clients taking one lock through the scripts' model (the server side:
//! [`server`]), with the faults the docs claim to survive, as a `stateright` model whose
//! properties are the promise.
//!
//! **Time.** One real clock in ms ticks ([`Act::Tick`]); the server's clock is it plus a step
//! ([`Act::StepClock`]); keys expire by the server's clock. A client acts on its timers, its
//! replies and its messages before time passes, unless it is paused ([`Act::Pause`]): a pause
//! is how a reply arrives late, a renewal is missed, a body outlives its lease. Each client's
//! lease is kept as the runtime keeps it (`lease.rs`): believed until `sent + ttl - margin`,
//! counted from the request's send; a handed lock from the send of the request its grant names,
//! for the grant window, trusted only with half the window left.
//!
//! **Faults.** Keys expire; clients pause (a budget of pauses); a replica receives the
//! primary's writes asynchronously ([`Act::Replicate`]) and may be promoted having missed some
//! ([`Act::FailOver`], once); the server's clock steps (once, by [`Setup::clock_step`]); a
//! client's process dies ([`Act::Crash`], a budget of [`Setup::crashes`]): its waiters queued,
//! its holds and its grants left to lapse.
//!
//! **What each property means** is in `docs/protocol.md`, with the mutation that breaks it.

mod apply;
mod client;
mod liveness;
mod phase;
pub mod quorum;
mod requests;
pub mod server;

use stateright::{Model, Property};

use crate::scripts::{Mutations, Reply};

pub use client::{Call, Client, Inflight};
pub use phase::{Entered, Phase, Req};
pub use server::Server;

/// Seeded bugs on the client's side (the runtime's), each off by default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClientBugs {
    /// Belief ends when the release's reply comes, not before the release is sent.
    pub belief_after_release: bool,
    /// A lease is counted from the reply's receipt, not from the request's send.
    pub lease_from_reply: bool,
    /// A handed lock is trusted for its window from the grant's receipt.
    pub trust_grant_from_receipt: bool,
    /// A handed lock is trusted whichever request its grant names.
    pub trust_any_grant: bool,
    /// A waiter only waits for messages: no look again at the holder's pttl or every recheck.
    pub no_recheck: bool,
    /// A lock that asks for replicas is believed before they acknowledged it.
    pub believe_before_replicas: bool,
    /// A re-entered lock is released at the inner hold's exit (holds not counted).
    pub release_at_first_exit: bool,
}

/// What the clients hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Hold {
    /// An exclusive lock (`distlock::lock`).
    #[default]
    Lock,
    /// A permit of a semaphore of `n` (`distlock::semaphore`).
    Permits(u8),
    /// The first `readers` clients read (`.read()`), the others write.
    ReadWrite {
        /// How many of the clients read.
        readers: usize,
    },
    /// Client 0 takes two locks as a set (`distlock::lock_all`), client 1 the first alone,
    /// client 2 the second alone.
    Sets,
}

/// What the model runs: its sizes, its timings, the faults allowed and the seeded bugs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Setup {
    /// What the clients hold.
    pub hold_kind: Hold,
    /// Clients (2 or 3).
    pub clients: usize,
    /// Acquisitions per client.
    pub rounds: u8,
    /// The lease (ms).
    pub ttl: i64,
    /// The grant window (ms; below the ttl, as 1 s is below a lock's ttl).
    pub window: i64,
    /// The safety margin (ms): `LEASE_MARGIN + ttl / 100` in the runtime.
    pub margin: i64,
    /// How far each client's lease clock may run from the server's, in % of its rate: each
    /// runs at `100 - drift` or `100 + drift` % (chosen at the start; 0: one rate). The
    /// runtime's bound is 1% (the margin's `ttl / 100`); the model's margin of 1 ms of a 4 ms
    /// lease is the allowance of a 25% bound.
    pub drift: i64,
    /// How long a hold lasts before its release (ms).
    pub hold: i64,
    /// How long a waiter waits (ms).
    pub wait: i64,
    /// A waiter to whom a release may hand the lock looks again at least this often (ms;
    /// `HANDED_RECHECK`).
    pub recheck: i64,
    /// Time runs to here (ms).
    pub horizon: i64,
    /// The watchdog renews the lease every `renew` ms (0: no renewal).
    pub renew: i64,
    /// Fenced: tokens, a fenced write per hold to the user's store, and confirmed grants.
    pub fenced: bool,
    /// A leader election: the holder proclaims its term (`LEADER_PROCLAIM`).
    pub leader: bool,
    /// A replica that a failover may promote.
    pub replica: bool,
    /// Holds ask for one replica's acknowledgement (`min_replicas = 1`, `WAIT`).
    pub min_replicas: bool,
    /// The server's clock steps by this much once (ms; 0: never).
    pub clock_step: i64,
    /// Pauses the clients may take, in all.
    pub pauses: u8,
    /// How long the fence floor is kept (ms).
    pub retention: i64,
    /// Each holder may re-enter its lock once (a body taking the lock it holds:
    /// `lock/reenter.rs`): a `RENEW` checks the hold is still its own and extends it, the
    /// holds are counted on the client, and the release goes at the last exit only.
    pub reentry: bool,
    /// How long a queue entry lives after the look (the attempt, or the carrying release) that
    /// made it, at most (ms; `ENTRY_LAPSE`, 3 s, three rechecks): a live waiter's next look
    /// renews it, a crashed one's lapses. Each entry's life is also its waiter's wait left.
    pub lapse: i64,
    /// The first `siblings` clients are waiters of one process (`d2:p0:...`, one `client_of`;
    /// 0 or 1: every client its own process): a release by one carries the next of the others
    /// queued (`RELEASE`'s next waiter), and they crash together.
    pub siblings: usize,
    /// How many times process 0 may crash ([`Act::Crash`]; 0 or 1).
    pub crashes: u8,
    /// Seeded bugs in the scripts.
    pub mutations: Mutations,
    /// Seeded bugs in the client.
    pub bugs: ClientBugs,
}

impl Default for Setup {
    /// Two clients, a lock of 4 ms with a grant window of 3, renewed, holds of 2 ms, waits of
    /// 8, one pause.
    fn default() -> Self {
        Setup {
            hold_kind: Hold::Lock,
            clients: 2,
            rounds: 1,
            ttl: 4,
            window: 3,
            margin: 1,
            drift: 0,
            hold: 2,
            wait: 8,
            recheck: 3,
            horizon: 12,
            renew: 0,
            fenced: false,
            leader: false,
            replica: false,
            min_replicas: false,
            clock_step: 0,
            pauses: 1,
            retention: 100,
            reentry: false,
            lapse: 9,
            siblings: 0,
            crashes: 0,
            mutations: Mutations::default(),
            bugs: ClientBugs::default(),
        }
    }
}

/// What a step broke that no single state shows (a history variable: the first such break).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// Fencing tokens the server handed out so far.
    pub issued: u8,
    /// The tokens holders accepted: (the server's count when it handed it out, the token).
    pub accepted: Vec<(u8, i64)>,
    /// The highest leader term written so far.
    pub max_term: i64,
    /// The highest token whose fenced write landed.
    pub max_landed: i64,
    /// A token accepted that is not above every token handed out (and accepted) before it.
    pub token_went_back: bool,
    /// A new term not above every earlier one.
    pub term_went_back: bool,
    /// A write landed with a token below one that landed before.
    pub stale_write_landed: bool,
    /// A waiter queued in Redis passed by a later arrival of a kind it conflicts with (not
    /// counting a newcomer's first attempt at a lock or a permit an expiry freed).
    pub passed: bool,
    /// A waiter passed by a newcomer's first attempt at a lock or a permit an expiry freed.
    pub barged: bool,
    /// A hold expired (no script let it go) and no script changed the holders since: the
    /// lock, or a permit, may be free with waiters queued who have not looked again yet.
    pub freed_by_expiry: bool,
    /// A lock let go by a script left free with waiters queued (not counting the release of a
    /// hold taken blind past them, see `taken_past_line`).
    pub left_free: bool,
    /// The hold last taken by a newcomer's first attempt (one that does not look at the line:
    /// `SET NX`, a fenced first attempt) while waiters were queued, which only an expiry allows.
    /// Nobody marked it (the waiters queued before it marked the lock that expired), so its
    /// release deletes it unread; those waiters look again at their own recheck, due at that
    /// expiry (`stranded` holds them to it).
    pub taken_past_line: Option<String>,
    /// Time passed a live, running, queued waiter (no request out) more than the recheck
    /// after its last look: only a message could still wake it.
    pub stranded: bool,
    /// A live waiter owed the hold when the lock was let go with only the crashed client's
    /// entries ahead of it (`liveness`): the waiter, by when, and whether any entry was ahead.
    pub owed: Option<(usize, i64, bool)>,
    /// A live waiter kept waiting past what it was owed.
    pub kept_waiting: bool,
    /// A live waiter behind the crashed client's entries was served in time (coverage).
    pub served_past_dead: bool,
    /// A lock was handed to a waiter by a grant (coverage).
    pub handed: bool,
    /// A failover happened.
    pub failed_over: bool,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    /// The real time (ms).
    pub now: i64,
    /// The deployment.
    pub server: Server,
    /// The clients.
    pub clients: Vec<Client>,
    /// Pauses left.
    pub pauses: u8,
    /// The failover is still to come (if a replica is set up).
    pub failover_left: bool,
    /// The clock step is still to come (if one is set up).
    pub step_left: bool,
    /// What steps broke.
    pub history: History,
    /// The step being taken sends its request slowly ([`Act::ActSlow`]; never set between
    /// steps).
    pub slow: bool,
    /// Crashes left.
    pub crashes: u8,
}

/// A step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Act {
    /// One ms passes.
    Tick,
    /// Client `c` does what is due: starts an acquire, attempts, renews, writes, releases,
    /// gives up.
    Act(usize),
    /// Client `c` does what is due, and its request is slow: it reaches the server later
    /// ([`Act::Apply`]), as a reply may come late (a pause's budget).
    ActSlow(usize),
    /// Client `c`'s slow request reaches the server.
    Apply(usize),
    /// Client `c` receives its reply.
    Receive(usize),
    /// Client `c` handles its next message.
    Hear(usize),
    /// Client `c` stops running (a GC pause, `SIGSTOP`, a slow network to it).
    Pause(usize),
    /// Client `c` runs again.
    Resume(usize),
    /// The replica catches up.
    Replicate,
    /// The replica is promoted.
    FailOver,
    /// The server's clock steps.
    StepClock,
    /// Process 0 dies (`SIGKILL`): its clients never act again (no attempt, no leaving, no
    /// release, no renewal); its requests not yet applied are lost.
    Crash,
}

/// The model: a [`Setup`].
#[derive(Clone, Debug)]
pub struct Protocol(pub Setup);

impl Protocol {
    /// Who believes at real time `now`: the clients whose `ensure_held` would be `Ok`.
    pub fn believers(&self, w: &World) -> Vec<usize> {
        (0..w.clients.len())
            .filter(|&c| w.clients[c].believes(w.now))
            .collect()
    }

    /// No two incompatible holds believed at one instant: one lock holder; at most `n`
    /// permits; a writer alone, or readers.
    pub fn compatible(&self, w: &World) -> bool {
        let believers = self.believers(w);
        match self.0.hold_kind {
            Hold::Lock => believers.len() <= 1,
            Hold::Permits(n) => believers.len() <= usize::from(n),
            Hold::ReadWrite { readers } => {
                let writers = believers.iter().filter(|&&c| c >= readers).count();
                writers == 0 || believers.len() == 1
            }
            Hold::Sets => [server::keys::LOCK, server::keys::LOCK2]
                .iter()
                .all(|name| {
                    let on = believers
                        .iter()
                        .filter(|&&c| requests::covers(&self.0, c).contains(name));
                    on.count() <= 1
                }),
        }
    }
}

impl Model for Protocol {
    type State = World;
    type Action = Act;

    fn init_states(&self) -> Vec<World> {
        let s = &self.0;
        let world = World {
            now: 0,
            server: Server::new(s.replica),
            clients: (0..s.clients)
                .map(|c| Client::new(c, if c < s.siblings { 0 } else { c }))
                .collect(),
            pauses: s.pauses,
            failover_left: s.replica,
            step_left: s.clock_step != 0,
            history: History::default(),
            slow: false,
            crashes: s.crashes,
        };
        if s.drift == 0 {
            return vec![world];
        }
        // Every client's lease clock slow or fast by the drift (a rate between is between them).
        let mut worlds = vec![world];
        for c in 0..s.clients {
            worlds = worlds
                .into_iter()
                .flat_map(|w| {
                    [100 - s.drift, 100 + s.drift].map(|rate| {
                        let mut w = w.clone();
                        w.clients[c].rate = rate;
                        w
                    })
                })
                .collect();
        }
        worlds
    }

    fn actions(&self, w: &World, acts: &mut Vec<Act>) {
        let s = &self.0;
        let mut forced = false;
        for (c, client) in w.clients.iter().enumerate() {
            if client.dead.is_some() {
                continue;
            }
            if client.paused {
                acts.push(Act::Resume(c));
                continue;
            }
            match &client.inflight {
                Some(f) if f.call.is_some() => acts.push(Act::Apply(c)),
                Some(_) => {
                    acts.push(Act::Receive(c));
                    forced = true;
                }
                None if client.due(s, w.now) => {
                    acts.push(Act::Act(c));
                    if w.pauses > 0 && client.sends(s, w.now) {
                        acts.push(Act::ActSlow(c));
                    }
                    forced |= client.forced(s, w.now);
                }
                None => {}
            }
            if !client.inbox.is_empty() {
                acts.push(Act::Hear(c));
                forced = true;
            }
            if w.pauses > 0 {
                acts.push(Act::Pause(c));
            }
        }
        if w.server.replica.is_some() && w.server.synced < w.server.seq {
            acts.push(Act::Replicate);
        }
        if w.failover_left {
            acts.push(Act::FailOver);
        }
        if w.step_left {
            acts.push(Act::StepClock);
        }
        let alive = |c: &Client| c.process == 0 && c.dead.is_none() && c.phase != Phase::Done;
        if w.crashes > 0 && w.clients.iter().any(alive) {
            acts.push(Act::Crash);
        }
        if !forced && w.now < s.horizon {
            acts.push(Act::Tick);
        }
    }

    fn next_state(&self, w: &World, act: Act) -> Option<World> {
        let s = &self.0;
        let mut w = w.clone();
        let waived = matches!(
            act,
            Act::Pause(_) | Act::ActSlow(_) | Act::FailOver | Act::StepClock
        );
        let ticked = act == Act::Tick;
        match act {
            Act::Tick => {
                w.now += 1;
                let at = w.server.clock(w.now);
                let held = w.server.holders(w.now - 1);
                let line = w.server.queue(w.now - 1);
                w.server.primary.purge(at);
                let after = w.server.holders(w.now);
                if expired(&held, &after) {
                    w.history.freed_by_expiry = true;
                    // A crashed client's hold lapsed: the waiters behind dead ones are owed it.
                    let dead = |h: &String| {
                        w.clients
                            .iter()
                            .any(|c| c.dead.is_some() && c.value() == *h)
                    };
                    if held.iter().any(|h| dead(h) && !after.contains(h)) && after.is_empty() {
                        liveness::let_go(s, &mut w, &line);
                    }
                }
                w.server.store.purge(w.now);
            }
            Act::Crash => {
                w.crashes -= 1;
                for c in 0..w.clients.len() {
                    if w.clients[c].process == 0 && w.clients[c].dead.is_none() {
                        client::crash(s, &mut w, c);
                    }
                }
            }
            Act::Act(c) => client::act(s, &mut w, c),
            Act::ActSlow(c) => {
                w.slow = true;
                client::act(s, &mut w, c);
                w.slow = false;
            }
            Act::Apply(c) => apply::apply(s, &mut w, c),
            Act::Receive(c) => client::receive(s, &mut w, c),
            Act::Hear(c) => client::hear(s, &mut w, c),
            Act::Pause(c) => {
                w.pauses -= 1;
                w.clients[c].paused = true;
            }
            Act::Resume(c) => w.clients[c].paused = false,
            Act::Replicate => w.server.replicate(),
            Act::FailOver => {
                w.failover_left = false;
                w.server.fail_over(w.now);
                w.history.failed_over = true;
            }
            Act::StepClock => {
                w.step_left = false;
                let held = w.server.holders(w.now);
                w.server.step_clock(s.clock_step);
                let at = w.server.clock(w.now);
                w.server.primary.purge(at);
                if expired(&held, &w.server.holders(w.now)) {
                    w.history.freed_by_expiry = true;
                }
            }
        }
        liveness::after(s, &mut w, waived, ticked);
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |m: &Protocol, w: &World| {
                m.compatible(w)
            }),
            Property::always("tokens rise", |_, w: &World| !w.history.token_went_back),
            Property::always("terms rise", |_, w: &World| !w.history.term_went_back),
            Property::always("fifo", |_, w: &World| !w.history.passed),
            Property::always("fifo, newcomers included", |_, w: &World| {
                !w.history.passed && !w.history.barged
            }),
            Property::always("no waiter stranded", |_, w: &World| {
                !w.history.left_free && !w.history.stranded
            }),
            Property::always("no stale write lands", |_, w: &World| {
                !w.history.stale_write_landed
            }),
            Property::always(
                "a live waiter is not kept waiting by dead waiters",
                |_, w: &World| !w.history.kept_waiting,
            ),
            Property::sometimes("a live waiter served past dead waiters", |_, w: &World| {
                w.history.served_past_dead
            }),
            Property::sometimes("a lock handed over", |_, w: &World| w.history.handed),
            Property::sometimes("two holds in turn", |_, w: &World| {
                w.clients.iter().filter(|c| c.taken > 0).count() >= 2
            }),
            Property::sometimes("two holds at once", |m: &Protocol, w: &World| {
                m.believers(w).len() >= 2
            }),
            Property::sometimes("a lock re-entered", |_, w: &World| {
                w.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        Phase::Holding {
                            entered: Entered::Inside,
                            ..
                        }
                    )
                })
            }),
        ]
    }

    fn within_boundary(&self, w: &World) -> bool {
        w.now <= self.0.horizon
    }
}

/// Whether time took a hold away: one of `before`'s holders is not among `after`'s.
fn expired(before: &[String], after: &[String]) -> bool {
    before.iter().any(|h| !after.contains(h))
}

/// `{id, {a, b, ...}}`'s inner integers.
pub(crate) fn inner(reply: &Reply) -> Vec<i64> {
    match reply.items().get(1) {
        Some(Reply::Array(a)) => a.iter().filter_map(Reply::int).collect(),
        Some(Reply::Int(n)) => vec![*n],
        _ => Vec::new(),
    }
}
