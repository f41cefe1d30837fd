//! The operations the conformance test drives, and their seeded random generator: every
//! script called the way the runtime calls it (its keys and arguments in their places), over a
//! few names, values and durations chosen so that calls collide (replays, handoffs, queues,
//! expiry at the exact millisecond), and the faults as explicit steps (the clock moved forward
//! or stepped back, a key gone early, another program's key).

use std::fmt;

use distlock_model::keyspace::{Keyspace, Value};

/// One step.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// `EVALSHA` of the script named (a `distlock::scripts` constant; `SET_NX_GET` is the
    /// plain acquire, a command).
    Eval {
        script: &'static str,
        keys: Vec<String>,
        argv: Vec<String>,
    },
    /// The server's clock moved by `us` (back when negative: a clock step).
    Clock { us: i64 },
    /// A key gone before its time (evicted, deleted by hand, `distlock release --force`).
    Del { key: String },
    /// Another program's (or another version's) value at a lock's key.
    Foreign { key: String, px: i64 },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Eval { script, keys, argv } => {
                write!(f, "{script} KEYS {keys:?} ARGV {argv:?}")
            }
            Op::Clock { us } => write!(f, "clock {us:+} us"),
            Op::Del { key } => write!(f, "DEL {key}"),
            Op::Foreign { key, px } => write!(f, "SET {key} x:foreign PX {px}"),
        }
    }
}

/// SplitMix64: small, seeded, the same sequence everywhere.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The keys of a name, as `LockKeys` places them (`prefix:{name}...`).
struct Keys {
    lock: String,
    fence: String,
    queue: String,
    ids: String,
    until: String,
    chan: String,
    writer: String,
    leader: String,
    terms: String,
    candidates: String,
}

fn keys(name: &str) -> Keys {
    let k = |suffix: &str| format!("dl:{{{name}}}{suffix}");
    Keys {
        lock: k(""),
        fence: k(":fence"),
        queue: k(":queue"),
        ids: k(":queue:ids"),
        until: k(":queue:until"),
        chan: k(":released"),
        writer: k(":writer"),
        leader: k(":leader"),
        terms: k(":leader:terms"),
        candidates: k(":leader:candidates"),
    }
}

/// The channels the scripts publish on (the subscriber listens to all of them).
pub(crate) fn channels() -> Vec<String> {
    ["a", "b", "r"].iter().map(|n| keys(n).chan).collect()
}

/// Owners `d2:<client>:<n>`: two waiters of one client (`d2:c1`, whose entries a sweep
/// removes together), and two clients of one waiter each.
const VALUES: &[&str] = &["d2:c1:1", "d2:c1:2", "d2:c2:1", "d2:c3:1"];
const TTLS: &[i64] = &[100, 400, 1000, 3000];
const WINDOWS: &[i64] = &[1, 100, 400, 1000];
const STEPS_MS: &[i64] = &[
    0, 1, 2, 50, 99, 100, 101, 300, 399, 400, 401, 500, 999, 1000, 1001, 2000, 2001, 3000,
];

/// The generator: a seeded stream of operations, each chosen against the model's keyspace so
/// that releases, renewals and handoffs mostly meet the values that hold the locks.
pub(crate) struct Gen {
    rng: Rng,
    ids: u64,
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

impl Gen {
    pub(crate) fn new(seed: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            ids: 0,
        }
    }

    fn id(&mut self) -> String {
        self.ids += 1;
        format!("q{}", self.ids)
    }

    /// A value: mostly one that is in the lock's key or its queue, if any.
    fn value(&mut self, ks: &Keyspace, name: &str, now_ms: i64) -> String {
        let k = keys(name);
        let mut seen: Vec<String> = Vec::new();
        for key in [&k.lock, &k.queue] {
            match ks.peek(key, now_ms).map(|e| &e.value) {
                // The owner's value: a waiters' mark (`+`) is in no owner's.
                Some(Value::Str(v)) => seen.push(v.strip_suffix('+').unwrap_or(v).to_owned()),
                Some(Value::ZSet(z)) => seen.extend(
                    z.keys()
                        .filter(|m| !m.starts_with("d2:p") && !m.starts_with("d2:r"))
                        .cloned(),
                ),
                _ => {}
            }
        }
        if !seen.is_empty() && self.rng.chance(60) {
            return self.rng.pick(&seen).clone();
        }
        s(self.rng.pick(VALUES))
    }

    fn ttl(&mut self) -> String {
        s(self.rng.pick(TTLS))
    }

    fn retention(&mut self) -> String {
        s(*self.rng.pick(&[0, 0, 5000, 600_000]))
    }

    /// A ticket: when the acquire started (ms, up to 3 s ago) times 1024, plus its window.
    fn ticket(&mut self, now_ms: i64) -> String {
        let started = now_ms - self.rng.below(3000) as i64;
        s(started * 1024 + self.rng.pick(WINDOWS))
    }

    /// A queue entry's life (ms, `entry_life`): mostly within the clock's steps, so entries
    /// lapse between calls; sometimes 0 (an entry without a lapse, as an older client's).
    fn life(&mut self) -> String {
        s(*self.rng.pick(&[0, 1, 50, 100, 400, 1000, 1000, 3000, 3000]))
    }

    fn keep(&mut self) -> String {
        s(*self.rng.pick(&[0, 0, 0, 0, 50, 300]))
    }

    fn sharded(&mut self) -> String {
        s(if self.rng.chance(20) { "s" } else { "-" })
    }

    /// A fencing token near the name's floor (or the clock), sometimes far below it.
    fn token(&mut self, ks: &Keyspace, name: &str, now_us: i64) -> String {
        let floor = match ks.peek(&keys(name).fence, now_us / 1000).map(|e| &e.value) {
            Some(Value::Str(f)) => f.parse::<i64>().unwrap_or(now_us),
            _ => now_us,
        };
        let t = match self.rng.below(4) {
            0 => floor,
            1 => floor + 1 + self.rng.below(5) as i64,
            2 => floor - 1 - self.rng.below(1000) as i64,
            _ => now_us,
        };
        s(t.max(1))
    }

    /// The next operation, against the model's keyspace at `now_us`.
    pub(crate) fn op(&mut self, ks: &Keyspace, now_us: i64) -> Op {
        let now_ms = now_us.div_euclid(1000);
        let name = s(*self.rng.pick(&["a", "a", "a", "b"]));
        let k = keys(&name);
        let eval = |script: &'static str, keys: Vec<String>, argv: Vec<String>| Op::Eval {
            script,
            keys,
            argv,
        };
        match self.rng.below(100) {
            0..=11 => {
                let us = 1000 * self.rng.pick(STEPS_MS) + self.rng.below(3) as i64 * 333;
                Op::Clock { us }
            }
            12 => Op::Clock {
                us: -1000 * self.rng.pick(&[1, 100, 1000, 5000]),
            },
            13 => Op::Del {
                key: s(self.rng.pick(&[&k.lock, &k.fence, &k.queue, &k.writer])),
            },
            14 => Op::Foreign {
                key: k.lock,
                px: *self.rng.pick(&[100, 1000]),
            },
            15..=20 => {
                let v = self.value(ks, &name, now_ms);
                eval("SET_NX_GET", vec![k.lock], vec![v, self.ttl()])
            }
            21..=25 => {
                let v = self.value(ks, &name, now_ms);
                let argv = vec![v, self.ttl(), self.retention(), self.id()];
                eval("ACQUIRE_FENCED", vec![k.lock, k.fence], argv)
            }
            26..=39 => {
                let v = self.value(ks, &name, now_ms);
                let mut keys = vec![k.lock, k.queue, k.chan, k.ids, k.until];
                let window = s(self.rng.pick(WINDOWS));
                let mut argv = vec![
                    v,
                    self.ttl(),
                    self.id(),
                    self.ticket(now_ms),
                    window,
                    self.sharded(),
                    self.life(),
                ];
                if self.rng.chance(30) {
                    keys.push(k.fence);
                    argv.push(self.retention());
                }
                eval("ACQUIRE_HANDED", keys, argv)
            }
            40..=51 => {
                let v = self.value(ks, &name, now_ms);
                let mut keys = vec![k.lock, k.chan];
                let mut argv = vec![v, self.id(), self.keep(), self.sharded()];
                if self.rng.chance(80) {
                    keys.extend([k.queue, k.ids]);
                    if self.rng.chance(25) {
                        let nv = s(self.rng.pick(VALUES));
                        argv.extend([nv, self.ticket(now_ms), self.id(), self.life()]);
                    }
                }
                eval("RELEASE", keys, argv)
            }
            52..=54 => {
                let handoff = self.rng.chance(70);
                let per = if handoff { 4 } else { 2 };
                let mut keys = Vec::new();
                let mut argv = vec![self.id(), self.sharded(), s(per)];
                for n in ["a", "b"] {
                    let kk = keys_of(n);
                    keys.extend([kk.lock.clone(), kk.chan.clone()]);
                    argv.extend([self.value(ks, n, now_ms), self.keep()]);
                    if handoff {
                        keys.extend([kk.queue.clone(), kk.ids.clone()]);
                        if self.rng.chance(30) {
                            let nv = s(self.rng.pick(VALUES));
                            argv.extend([nv, self.ticket(now_ms), self.id(), self.life()]);
                        } else {
                            argv.extend([s(""), s("0"), s(""), s("0")]);
                        }
                    }
                }
                eval("RELEASE_MANY", keys, argv)
            }
            55..=61 => {
                let mut keys = vec![k.lock.clone()];
                let mut argv = vec![self.id(), self.ttl(), self.value(ks, &name, now_ms)];
                if self.rng.chance(25) {
                    let other = keys_of(if name == "a" { "b" } else { "a" });
                    keys.push(other.lock);
                    argv.extend([self.ttl(), self.value(ks, &name, now_ms)]);
                }
                eval("RENEW", keys, argv)
            }
            62..=65 => {
                let v = self.value(ks, &name, now_ms);
                let keys = vec![k.queue, k.until, k.lock, k.chan, k.ids];
                eval(
                    "LEAVE_QUEUE",
                    keys,
                    vec![v, self.id(), self.sharded(), s(5)],
                )
            }
            66..=70 => self.redlock(ks, now_us),
            71..=75 => {
                let v = self.value(ks, &name, now_ms);
                let n = s(*self.rng.pick(&[2, 2, 2, 1, 3]));
                let mut keys = vec![k.lock, k.fence];
                let mut argv = vec![v, self.ttl(), n, self.retention(), self.id()];
                if self.rng.chance(70) {
                    keys.extend([k.queue, k.chan, k.ids]);
                    argv.extend([self.ticket(now_ms), self.sharded(), self.life()]);
                }
                eval("ACQUIRE_PERMIT", keys, argv)
            }
            76..=80 => {
                let v = self.value(ks, &name, now_ms);
                let mut keys = vec![k.lock, k.fence, k.writer];
                let mut argv = vec![v, self.ttl(), self.retention(), self.id()];
                if self.rng.chance(70) {
                    keys.extend([k.queue, k.chan, k.ids]);
                    if self.rng.chance(70) {
                        keys.push(k.until);
                    }
                    let ticket = if self.rng.chance(80) {
                        self.ticket(now_ms)
                    } else {
                        s(0)
                    };
                    argv.extend([ticket, self.sharded(), self.life()]);
                }
                eval("ACQUIRE_READ", keys, argv)
            }
            81..=83 => {
                let v = self.value(ks, &name, now_ms);
                let intent = s(*self.rng.pick(&[0, 1000]));
                let argv = vec![v, self.ttl(), self.retention(), self.id(), intent];
                eval("ACQUIRE_WRITE", vec![k.lock, k.fence, k.writer], argv)
            }
            84..=87 => {
                let turn = self.rng.chance(60);
                let mut keys = Vec::new();
                for n in ["a", "b"] {
                    let kk = keys_of(n);
                    keys.extend([kk.lock.clone(), kk.fence.clone()]);
                    if turn {
                        keys.extend([kk.queue.clone(), kk.chan.clone(), kk.ids.clone()]);
                    }
                }
                let v = self.value(ks, &name, now_ms);
                let mut argv = vec![v, self.ttl(), self.retention(), self.id()];
                if turn {
                    argv.extend([self.ticket(now_ms), self.sharded(), self.life()]);
                }
                eval("ACQUIRE_ALL", keys, argv)
            }
            88..=92 => self.leader(ks, &name, now_us),
            _ => self.store(ks, &name, now_us),
        }
    }

    /// RedLock's calls, on their own name (`r`): a RedLock master never sees a handoff's queue.
    fn redlock(&mut self, ks: &Keyspace, now_us: i64) -> Op {
        let k = keys("r");
        let v = self.value(ks, "r", now_us / 1000);
        match self.rng.below(10) {
            0..=5 => {
                let ticket = if self.rng.chance(80) {
                    now_us - self.rng.below(3_000_000) as i64
                } else {
                    0
                };
                let queue = s(if self.rng.chance(70) { "1" } else { "0" });
                let mut argv = vec![
                    v,
                    self.ttl(),
                    self.retention(),
                    self.id(),
                    s(ticket),
                    s(300),
                    queue,
                ];
                // The entry's life caps its lapse (absent from an older client).
                if self.rng.chance(80) {
                    argv.push(self.life());
                }
                Op::Eval {
                    script: "ACQUIRE_QUEUED",
                    keys: vec![k.lock, k.fence, k.queue, k.until],
                    argv,
                }
            }
            6 => {
                let to = if self.rng.chance(30) {
                    s(0)
                } else {
                    self.token(ks, "r", now_us)
                };
                Op::Eval {
                    script: "FENCE_FLOOR",
                    keys: vec![k.fence],
                    argv: vec![self.id(), to, s(5000)],
                }
            }
            7 => {
                // A RedLock set's waiter leaves the queues of several locks at once (2 keys per
                // lock); the second lock, `r2`, is never queued at here.
                let mut keys = vec![k.queue, k.until];
                if self.rng.chance(50) {
                    let other = keys_of("r2");
                    keys.extend([other.queue, other.until]);
                }
                Op::Eval {
                    script: "LEAVE_QUEUE",
                    keys,
                    argv: vec![v, self.id(), s("-"), s(2)],
                }
            }
            8 => Op::Eval {
                script: "RELEASE",
                keys: vec![k.lock, k.chan],
                argv: vec![v, self.id(), self.keep(), s("-")],
            },
            _ => Op::Eval {
                script: "RENEW",
                keys: vec![k.lock],
                argv: vec![self.id(), self.ttl(), v],
            },
        }
    }

    fn leader(&mut self, ks: &Keyspace, name: &str, now_us: i64) -> Op {
        let k = keys(name);
        let v = self.value(ks, name, now_us / 1000);
        let ident = s(self.rng.pick(&["alpha", "beta"]));
        let (script, keys, argv) = match self.rng.below(8) {
            0..=3 => {
                let token = self.token(ks, name, now_us);
                let known = if self.rng.chance(70) {
                    s(0)
                } else {
                    self.token(ks, name, now_us)
                };
                let exact = if self.rng.chance(80) {
                    s(0)
                } else {
                    self.token(ks, name, now_us)
                };
                let mode = s(if self.rng.chance(80) { "n" } else { "v" });
                let argv = vec![
                    self.id(),
                    v,
                    token,
                    ident,
                    s(5000),
                    self.sharded(),
                    known,
                    exact,
                    mode,
                ];
                (
                    "LEADER_PROCLAIM",
                    vec![k.lock, k.fence, k.leader, k.terms, k.chan],
                    argv,
                )
            }
            4 | 5 => (
                "LEADER_CURRENT",
                vec![k.lock, k.leader, k.terms],
                vec![self.id()],
            ),
            6 => {
                let who = if self.rng.chance(30) { s("") } else { ident };
                (
                    "LEADER_CANDIDATE",
                    vec![k.candidates.clone()],
                    vec![self.id(), v, who, s(2000)],
                )
            }
            _ => (
                "LEADER_CANDIDATES",
                vec![k.lock, k.queue, k.candidates],
                vec![self.id()],
            ),
        };
        Op::Eval { script, keys, argv }
    }

    fn store(&mut self, ks: &Keyspace, name: &str, now_us: i64) -> Op {
        let data = s(self.rng.pick(&["dl:{a}:data", "dl:{a}:data2"]));
        let mark = s("dl:{a}:mark");
        let token = self.token(ks, name, now_us);
        let keep = s(*self.rng.pick(&[0, 5000]));
        let lock = s(self.rng.pick(&["a", "a", "b"]));
        let (keys, argv) = match self.rng.below(10) {
            0..=4 => (vec![data, mark], vec![s("set"), lock, token, keep, s("v")]),
            5 => (vec![data], vec![s("set"), lock, token, keep, s("w")]),
            6 | 7 => (vec![data, mark], vec![s("del"), lock, token, keep]),
            8 => (vec![mark], vec![s("claim"), lock, token, keep]),
            _ => {
                let record = s("dl:client:c1");
                let argv = vec![s(5000), s("pid"), s(self.rng.below(9)), s("host"), s("h")];
                return Op::Eval {
                    script: "CLIENT_RECORD",
                    keys: vec![record],
                    argv,
                };
            }
        };
        Op::Eval {
            script: "FENCED_WRITE",
            keys,
            argv,
        }
    }
}

fn keys_of(name: &str) -> Keys {
    keys(name)
}
