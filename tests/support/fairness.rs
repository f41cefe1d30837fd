//! A fairness run: one task per client takes one lock again and again (hold a random 20–200 ms,
//! release, ask again at once, waiting up to a bound), and the figures that say whether the
//! clients got their turns: `Ok` per client, `Busy`, the longest streak of one client, Jain's
//! index over the `Ok` counts and the handoff latency (a release to the next holder's `Ok`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{Client, Error};

/// What each acquire of a [`fairness_run`] takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Hold {
    /// The lock.
    #[default]
    Lock,
    /// The lock with a fencing token (`fenced`): the tokens must rise from holder to holder.
    Fenced,
    /// The lock acknowledged by this many replicas (`min_replicas`).
    Replicated(usize),
    /// One permit of a semaphore of this many (1: exclusive, as the lock).
    Permits(u32),
    /// A set of two locks, the name and `<name>:2` (`lock_all`).
    Set,
    /// Readers and writers of one lock: the clients of even index take read holds, the others
    /// write (take the lock). A writer overlapping anyone counts as an overlap.
    ReadWrite,
}

/// The shape of a [`fairness_run`].
#[derive(Debug, Clone, Copy)]
pub struct FairnessRun {
    /// How long the clients keep asking.
    pub duration: Duration,
    /// The waiting bound of each acquire (`wait`).
    pub wait: Duration,
    /// The lock's ttl (longer than any hold).
    pub ttl: Duration,
    /// Each hold lasts a random time in this range (ms).
    pub hold_ms: (u64, u64),
    /// What is taken.
    pub hold: Hold,
}

impl Default for FairnessRun {
    /// The run of issue 19, item 3, made shorter: 10 s, `wait = 3s`, holds of 20–200 ms.
    fn default() -> Self {
        FairnessRun {
            duration: Duration::from_secs(10),
            wait: Duration::from_secs(3),
            ttl: Duration::from_secs(5),
            hold_ms: (20, 200),
            hold: Hold::Lock,
        }
    }
}

/// What a [`fairness_run`] measured.
#[derive(Debug, Clone)]
pub struct Fairness {
    /// What was taken.
    pub hold: Hold,
    /// `Ok` acquisitions per client (in the order of the clients given).
    pub ok: Vec<u64>,
    /// Acquires that ended `Busy` (a whole `wait` without the lock).
    pub busy: u64,
    /// Acquires that failed otherwise (with the first such error).
    pub other_errors: u64,
    /// The first error that was neither `Ok` nor `Busy`.
    pub first_error: Option<String>,
    /// The longest run of consecutive holds by one client.
    pub longest_streak: usize,
    /// Holders that overlapped: more inside at once than the hold admits (one, or a
    /// semaphore's permits; readers share, a writer admits nobody). Must be 0.
    pub overlaps: u64,
    /// Fenced holds whose token was not above the previous holder's (must be 0).
    pub token_regressions: u64,
    /// Handoff latency (a release call to the next holder, of another client, acquiring):
    /// median, 90th and 99th percentile.
    pub handoff_p50: Duration,
    /// See [`Fairness::handoff_p50`].
    pub handoff_p90: Duration,
    /// See [`Fairness::handoff_p50`].
    pub handoff_p99: Duration,
}

impl Fairness {
    /// Jain's fairness index over the `Ok` counts: (Σx)² / (n·Σx²), 1 when all are equal,
    /// 1/n when one client got everything. For [`Hold::ReadWrite`] the lower of the readers'
    /// and the writers' (readers share, so they get more turns than writers).
    pub fn jain(&self) -> f64 {
        if self.hold != Hold::ReadWrite {
            return jain(&self.ok);
        }
        let pick =
            |parity| -> Vec<u64> { self.ok.iter().skip(parity).step_by(2).copied().collect() };
        jain(&pick(0)).min(jain(&pick(1)))
    }

    /// Asserts that every waiter took its turn: no holders overlapping, fenced tokens rising,
    /// no acquire failing or running out of its wait (`Busy`), and Jain's index at least
    /// `min_jain`; each failure says the run's [`Fairness::summary`].
    pub fn assert_in_turn(&self, min_jain: f64) {
        let summary = self.summary();
        assert_eq!(self.overlaps, 0, "{summary}");
        assert_eq!(self.token_regressions, 0, "{summary}");
        assert_eq!(self.busy + self.other_errors, 0, "{summary}");
        assert!(self.jain() >= min_jain, "{summary}");
    }

    /// One line for a test's output.
    pub fn summary(&self) -> String {
        format!(
            "ok per client {:?}, busy {}, other errors {}, longest streak {}, Jain {:.3}, handoff p50 {:.1} ms p90 {:.1} ms p99 {:.1} ms, overlaps {}, token regressions {}",
            self.ok,
            self.busy,
            self.other_errors,
            self.longest_streak,
            self.jain(),
            self.handoff_p50.as_secs_f64() * 1e3,
            self.handoff_p90.as_secs_f64() * 1e3,
            self.handoff_p99.as_secs_f64() * 1e3,
            self.overlaps,
            self.token_regressions
        )
    }
}

/// Jain's fairness index of `x` (1 for an empty or all-zero `x`).
pub fn jain(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// What the clients' tasks share.
#[derive(Default)]
struct Shared {
    inside: AtomicUsize,
    /// Writers inside ([`Hold::ReadWrite`]).
    writers: AtomicUsize,
    overlaps: AtomicU64,
    token_regressions: AtomicU64,
    /// The last fenced holder's token.
    last_token: Mutex<Option<u64>>,
    /// The holders in order (client index) and, per handoff to another client, its latency.
    holders: Mutex<Vec<usize>>,
    handoffs: Mutex<Vec<Duration>>,
    /// When the last release was called, and by which client.
    released: Mutex<Option<(Instant, usize)>>,
}

/// Runs `run` with one task per client on lock `name` and returns its figures.
pub async fn fairness_run(clients: &[Client], name: &str, run: FairnessRun) -> Fairness {
    let shared = Arc::new(Shared::default());
    let until = Instant::now() + run.duration;
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, shared, name) = (client.clone(), shared.clone(), name.to_owned());
        tasks.push(tokio::spawn(async move {
            one_client(i, client, &name, run, until, &shared).await
        }));
    }
    let (mut ok, mut busy, mut other_errors, mut first_error) = (Vec::new(), 0, 0, None);
    for task in tasks {
        let (mine, busy_here, errors, error) = task.await.expect("a fairness task");
        ok.push(mine);
        busy += busy_here;
        other_errors += errors;
        first_error = first_error.or(error);
    }
    let holders = shared.holders.lock().unwrap().clone();
    let longest_streak = holders
        .chunk_by(|a, b| a == b)
        .map(<[usize]>::len)
        .max()
        .unwrap_or(0);
    let mut handoffs = shared.handoffs.lock().unwrap().clone();
    handoffs.sort();
    let at = |q: f64| {
        handoffs
            .get(((handoffs.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    Fairness {
        hold: run.hold,
        ok,
        busy,
        other_errors,
        first_error,
        longest_streak,
        overlaps: shared.overlaps.load(Ordering::SeqCst),
        token_regressions: shared.token_regressions.load(Ordering::SeqCst),
        handoff_p50: at(0.5),
        handoff_p90: at(0.9),
        handoff_p99: at(0.99),
    }
}

/// One client's loop: `Ok` count, `Busy` count, other errors and the first of them.
async fn one_client(
    me: usize,
    client: Client,
    name: &str,
    run: FairnessRun,
    until: Instant,
    shared: &Shared,
) -> (u64, u64, u64, Option<String>) {
    // A small xorshift per client: reproducible holds, no dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (me as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut ok, mut busy, mut errors, mut first) = (0, 0, 0, None);
    while Instant::now() < until {
        let reader = run.hold == Hold::ReadWrite && me.is_multiple_of(2);
        let builder = match run.hold {
            Hold::Lock => client.lock(name),
            Hold::ReadWrite if reader => client.lock(name).read(),
            Hold::ReadWrite => client.lock(name),
            Hold::Fenced => client.lock(name).fenced(true),
            Hold::Replicated(n) => client.lock(name).min_replicas(n),
            Hold::Permits(n) => client.semaphore(name, n),
            Hold::Set => client.lock_all([name.to_owned(), format!("{name}:2")]),
        };
        let builder = builder.ttl(run.ttl).wait(run.wait);
        let guard = match builder.acquire().await {
            Ok(guard) => guard,
            Err(Error::Busy { .. }) => {
                busy += 1;
                continue;
            }
            Err(error) => {
                errors += 1;
                first.get_or_insert_with(|| error.to_string());
                continue;
            }
        };
        let now = Instant::now();
        let admits = match run.hold {
            Hold::Permits(n) => n as usize,
            Hold::ReadWrite if reader => usize::MAX,
            _ => 1,
        };
        let writer = run.hold == Hold::ReadWrite && !reader;
        let writers = match writer {
            true => shared.writers.fetch_add(1, Ordering::SeqCst) + 1,
            false => shared.writers.load(Ordering::SeqCst),
        };
        if shared.inside.fetch_add(1, Ordering::SeqCst) >= admits || (reader && writers > 0) {
            shared.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if let Some((at, by)) = *shared.released.lock().unwrap() {
            if by != me {
                shared.handoffs.lock().unwrap().push(now - at);
            }
        }
        shared.holders.lock().unwrap().push(me);
        if run.hold == Hold::Fenced {
            let token = guard.token();
            let mut last = shared.last_token.lock().unwrap();
            if token.is_none() || token <= *last {
                shared.token_regressions.fetch_add(1, Ordering::SeqCst);
            }
            *last = token.max(*last);
        }
        ok += 1;
        let (low, high) = run.hold_ms;
        let hold = low + next() % (high - low + 1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        shared.inside.fetch_sub(1, Ordering::SeqCst);
        if writer {
            shared.writers.fetch_sub(1, Ordering::SeqCst);
        }
        // From the release call: the next holder cannot take the lock before it.
        *shared.released.lock().unwrap() = Some((Instant::now(), me));
        match guard.release().await {
            Ok(()) => {}
            Err(error) => {
                errors += 1;
                first.get_or_insert_with(|| error.to_string());
            }
        }
    }
    (ok, busy, errors, first)
}
