//! The modelled deployment: a primary running the scripts' model ([`crate::scripts`]) on its
//! own clock, and optionally a replica that receives its writes asynchronously and may be
//! promoted having missed some.

use crate::keyspace::Keyspace;
use crate::scripts::{self, Mutations, Ran, PERMITS, READERS};

/// The keys of the one lock name the model uses (`prefix:{name}...` in the runtime; short
/// here: the scripts only see them as names).
pub mod keys {
    /// The lock.
    pub const LOCK: &str = "l";
    /// A set's second lock (its other keys `m:q`, `m:i`, ... as the first's).
    pub const LOCK2: &str = "m";
    /// Its waiters' queue.
    pub const QUEUE: &str = "l:q";
    /// The request that last queued each waiter.
    pub const IDS: &str = "l:i";
    /// When a writer behind readers lapses.
    pub const UNTIL: &str = "l:u";
    /// The release channel.
    pub const CHAN: &str = "l:c";
    /// The fence floor.
    pub const FENCE: &str = "l:f";
    /// The leader record.
    pub const LEADER: &str = "l:L";
    /// The terms list.
    pub const TERMS: &str = "l:T";
    /// A readers' writer intent.
    pub const WRITER: &str = "l:w";
    /// The user's fenced value.
    pub const DATA: &str = "d";
    /// The lock's watermark in the user's store.
    pub const MARK: &str = "m";
}

/// The server side.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    /// The primary's keyspace.
    pub primary: Keyspace,
    /// The replica's keyspace (a copy of the primary as of its last sync), if there is one.
    pub replica: Option<Keyspace>,
    /// Writes applied on the primary (counted only with a replica).
    pub seq: u8,
    /// The last write the replica has.
    pub synced: u8,
    /// Failovers so far: a reply from before one is acknowledged by no replica now.
    pub epoch: u8,
    /// The server's clock minus the real time (ms): a clock step.
    pub offset: i64,
    /// The user's store (fenced values and the watermark), on a server of its own that never
    /// fails over: what a stale write may reach.
    pub store: Keyspace,
}

impl Server {
    /// A server with nothing in it, with a replica if `replica`.
    pub fn new(replica: bool) -> Server {
        Server {
            primary: Keyspace::new(),
            replica: replica.then(Keyspace::new),
            seq: 0,
            synced: 0,
            epoch: 0,
            offset: 0,
            store: Keyspace::new(),
        }
    }

    /// The server's clock (ms) at real time `now`.
    pub fn clock(&self, now: i64) -> i64 {
        now + self.offset
    }

    /// Runs a lock script on the primary at real time `now`.
    pub fn run(
        &mut self,
        now: i64,
        script: &str,
        k: &[&str],
        argv: &[String],
        m: &Mutations,
    ) -> Ran {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let at = self.clock(now);
        let before = self.primary.clone();
        let ran = scripts::run(script, &mut self.primary, at * 1000, k, &argv, m);
        self.primary.purge(at);
        if self.replica.is_some() && self.primary != before {
            self.seq += 1;
        }
        ran
    }

    /// Runs `FENCED_WRITE` on the user's store (its clock is the real time).
    pub fn write(&mut self, now: i64, k: &[&str], argv: &[String], m: &Mutations) -> Ran {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        scripts::run("FENCED_WRITE", &mut self.store, now * 1000, k, &argv, m)
    }

    /// The replica catches up with the primary.
    pub fn replicate(&mut self) {
        if let Some(replica) = self.replica.as_mut() {
            *replica = self.primary.clone();
            self.synced = self.seq;
        }
    }

    /// `WAIT 1` for a write made at `seq` in `epoch`: acknowledged if the replica has it (or
    /// catches up now, as a replica may), never across a failover.
    pub fn acknowledge(&mut self, seq: u8, epoch: u8) -> bool {
        if epoch != self.epoch || self.replica.is_none() {
            return false;
        }
        if self.synced < seq {
            self.replicate();
        }
        true
    }

    /// The replica is promoted: the primary becomes what the replica had.
    pub fn fail_over(&mut self, now: i64) {
        if let Some(replica) = self.replica.take() {
            self.primary = replica;
            self.primary.purge(self.clock(now));
            self.replica = Some(self.primary.clone());
            self.epoch += 1;
            self.seq = 0;
            self.synced = 0;
        }
    }

    /// The server's clock steps by `by` ms.
    pub fn step_clock(&mut self, by: i64) {
        self.offset += by;
    }

    /// Who the lock key names, if it is held at real time `now` (its owner's value: a mark of
    /// its waiters, `+`, is no part of it).
    pub fn holder(&self, now: i64) -> Option<&str> {
        match self
            .primary
            .peek(keys::LOCK, self.clock(now))
            .map(|e| &e.value)
        {
            Some(crate::keyspace::Value::Str(v)) => Some(v.strip_suffix('+').unwrap_or(v)),
            _ => None,
        }
    }

    /// Who holds the lock at real time `now`: its holder (unmarked), or the live members of its set of
    /// holders (permits or readers, a grant among them for its window; a member past its
    /// deadline is no holder, though no script has removed it yet).
    pub fn holders(&self, now: i64) -> Vec<String> {
        let at = self.clock(now);
        match self.primary.peek(keys::LOCK, at).map(|e| &e.value) {
            Some(crate::keyspace::Value::Str(v)) => {
                vec![v.strip_suffix('+').unwrap_or(v).to_owned()]
            }
            Some(crate::keyspace::Value::ZSet(z)) => z
                .iter()
                .filter(|(m, &deadline)| deadline > at && *m != PERMITS && *m != READERS)
                .map(|(m, _)| m.clone())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The ticket of `value` in the lock's queue, if it is queued.
    pub fn queued(&self, now: i64, value: &str) -> Option<i64> {
        match self
            .primary
            .peek(keys::QUEUE, self.clock(now))
            .map(|e| &e.value)
        {
            Some(crate::keyspace::Value::ZSet(z)) => z.get(value).copied(),
            _ => None,
        }
    }

    /// Whether anybody is queued.
    pub fn queue_len(&self, now: i64) -> usize {
        match self
            .primary
            .peek(keys::QUEUE, self.clock(now))
            .map(|e| &e.value)
        {
            Some(crate::keyspace::Value::ZSet(z)) => z.len(),
            _ => 0,
        }
    }

    /// The lock's queue at real time `now`, in its order (ticket, then value).
    pub fn queue(&self, now: i64) -> Vec<(String, i64)> {
        let mut q: Vec<(String, i64)> = match self
            .primary
            .peek(keys::QUEUE, self.clock(now))
            .map(|e| &e.value)
        {
            Some(crate::keyspace::Value::ZSet(z)) => {
                z.iter().map(|(m, &t)| (m.clone(), t)).collect()
            }
            _ => Vec::new(),
        };
        q.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        q
    }
}
