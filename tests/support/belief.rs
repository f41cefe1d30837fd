//! The holder's belief against a contender, through a fault: the test of "while the caller
//! believes it holds a lock nobody else does".
//!
//! A holder takes a fenced lock (renewed, unless the round says otherwise) and asks
//! `ensure_held()` every 25 ms, recording each `Ok`; a contender (its own client, connected
//! when the round says) tries to take the same lock every 10 ms and keeps whatever it wins,
//! recording when. The hold is of the round's [`Kind`]: the lock, the one permit of a
//! semaphore of 1, or a read hold against a writer. The fault runs off the
//! runtime's threads 1 s after the lock was taken. Afterwards, [`Timeline::worst_overlap`] is
//! how long the holder went on believing after the contender took the lock (it must be zero),
//! and, where the round can ask which node serves the lock ([`Probe`]), how long and by how
//! much the holder's deadline outran that node's copy of the key.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Client, LockBuilder, LockGuard};
use tokio::time::Instant;

/// The lock every round contends for (`distlock:{belief}` in Redis).
pub const BELIEF_LOCK: &str = "belief";

/// Makes a client (called once for the holder, once for the contender).
pub type Connect = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Client> + Send>> + Send + Sync>;

/// The port of the node that serves [`BELIEF_LOCK`] now (the one the next acquirer reaches);
/// `None` when nobody can say.
pub type Probe = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Option<u16>> + Send>> + Send + Sync>;

/// What the holder holds, and what the contender tries to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// The lock, against the lock.
    #[default]
    Lock,
    /// The one permit of a semaphore of 1, against the same.
    Permit,
    /// A read hold, against a writer (the lock itself).
    Read,
}

impl Kind {
    /// The holder's acquisition of [`BELIEF_LOCK`] through `client`.
    fn holder(self, client: &Client) -> LockBuilder {
        match self {
            Kind::Lock => client.lock(BELIEF_LOCK),
            Kind::Permit => client.semaphore(BELIEF_LOCK, 1),
            Kind::Read => client.lock(BELIEF_LOCK).read(),
        }
    }

    /// The contender's acquisition: whatever excludes the holder.
    fn contender(self, client: &Client) -> LockBuilder {
        match self {
            Kind::Lock | Kind::Read => client.lock(BELIEF_LOCK),
            Kind::Permit => client.semaphore(BELIEF_LOCK, 1),
        }
    }
}

/// One round's settings.
pub struct Round {
    /// How clients are made.
    pub connect: Connect,
    /// The holder's lease.
    pub ttl: Duration,
    /// The holder's `min_replicas`.
    pub replicas: usize,
    /// The holder's lease is renewed (otherwise it only runs out, and the round must end
    /// before its ttl).
    pub renew: bool,
    /// How long the round runs, from the acquire.
    pub run: Duration,
    /// When the contender connects, from the acquire (in the middle of the fault, say).
    pub contender_from: Duration,
    /// Which node serves the lock, for the deadline gap.
    pub probe: Option<Probe>,
    /// What the holder holds (the lock unless [`Round::of`] says otherwise).
    pub kind: Kind,
}

/// What the holder and the contender saw in one round.
#[derive(Default, Debug)]
pub struct Timeline {
    /// Each `ensure_held()` that said `Ok`.
    pub held: Vec<Instant>,
    /// The holder was told the lock is lost: when, and the error.
    pub lost: Option<(Instant, String)>,
    /// Each acquire the contender won.
    pub taken: Vec<Instant>,
    /// The most the holder's deadline exceeded the expiry of its key on the node serving it.
    pub worst_gap: Duration,
    /// The longest stretch of samples with such a gap.
    pub longest_gap: Duration,
    gap_since: Option<Instant>,
}

impl Timeline {
    /// How long the holder went on believing after the contender took the lock (zero: never).
    pub fn worst_overlap(&self) -> Duration {
        let Some(first) = self.taken.first() else {
            return Duration::ZERO;
        };
        self.held
            .iter()
            .filter(|h| *h >= first)
            .map(|h| h.duration_since(*first))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Asserts that the fault cost the holder its lock (the contender took it) and that the
    /// holder was told, believing at most `within` after the contender took it.
    pub fn assert_told_within(&self, within: Duration) {
        eprintln!("{}", self.summary());
        assert!(
            !self.taken.is_empty(),
            "the fault loses the lock: {}",
            self.summary()
        );
        assert!(
            self.lost.is_some(),
            "the holder is told: {}",
            self.summary()
        );
        assert!(
            self.worst_overlap() <= within,
            "told too late: {}",
            self.summary()
        );
    }

    /// Asserts that nobody else took the lock and the holder kept it.
    pub fn assert_kept(&self) {
        eprintln!("{}", self.summary());
        assert!(
            self.taken.is_empty(),
            "nobody else takes the lock: {}",
            self.summary()
        );
        assert!(
            self.lost.is_none(),
            "the holder keeps it: {}",
            self.summary()
        );
    }

    /// One line: checks, loss, contender wins, overlap, gap.
    pub fn summary(&self) -> String {
        format!(
            "{} held checks, lost: {}, contender took it {} times, worst overlap {} ms, deadline gap {} ms for {} ms",
            self.held.len(),
            self.lost.as_ref().map_or("no".to_owned(), |(_, e)| e.clone()),
            self.taken.len(),
            self.worst_overlap().as_millis(),
            self.worst_gap.as_millis(),
            self.longest_gap.as_millis(),
        )
    }
}

impl Round {
    /// A round whose clients connect with `config` (called once per client), no replicas
    /// asked for, no probe, the contender from the start.
    pub fn with_config(
        config: impl Fn() -> distlock::Config + Send + Sync + 'static,
        ttl: Duration,
        renew: bool,
        run: Duration,
    ) -> Round {
        let config = Arc::new(config);
        Round {
            connect: Arc::new(move || {
                let config = config();
                Box::pin(async move { config.connect().await.expect("connect") })
            }),
            ttl,
            replicas: 0,
            renew,
            run,
            contender_from: Duration::ZERO,
            probe: None,
            kind: Kind::Lock,
        }
    }

    /// The same round over a hold of `kind`.
    pub fn of(self, kind: Kind) -> Round {
        Round { kind, ..self }
    }
}

/// Runs one round; `fault` is called (on a blocking thread) 1 s after the lock was taken.
/// Returns what was seen and the holder's guard (still held, or lost).
pub async fn round(round: Round, fault: impl FnOnce() + Send + 'static) -> (Timeline, LockGuard) {
    let holder = (round.connect)().await;
    let guard = round
        .kind
        .holder(&holder)
        .ttl(round.ttl)
        .renew(round.renew)
        .fenced(true)
        .min_replicas(round.replicas)
        .acquire()
        .await
        .expect("the holder takes the lock");
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let end = Instant::now() + round.run;
    let contending = tokio::spawn({
        let (timeline, connect, ttl) = (timeline.clone(), round.connect.clone(), round.ttl);
        let kind = round.kind;
        async move {
            tokio::time::sleep(round.contender_from).await;
            let contender = connect().await;
            while Instant::now() < end {
                if let Ok(g) = kind.contender(&contender).ttl(ttl).acquire().await {
                    timeline.lock().unwrap().taken.push(Instant::now());
                    // Kept: the holder must find out it lost the lock.
                    std::mem::forget(g);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    let faulting = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tokio::task::spawn_blocking(fault).await.unwrap();
    });
    while Instant::now() < end {
        let now = Instant::now();
        let deadline = guard.guaranteed_until();
        match guard.ensure_held() {
            Ok(()) => {
                let gap = match &round.probe {
                    Some(probe) => gap(probe, deadline).await,
                    None => Duration::ZERO,
                };
                let mut t = timeline.lock().unwrap();
                t.held.push(now);
                t.worst_gap = t.worst_gap.max(gap);
                if gap > Duration::ZERO {
                    let since = *t.gap_since.get_or_insert(now);
                    t.longest_gap = t.longest_gap.max(now - since);
                } else {
                    t.gap_since = None;
                }
            }
            Err(error) => {
                timeline.lock().unwrap().lost = Some((now, error.to_string()));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    contending.await.unwrap();
    faulting.await.unwrap();
    let timeline = Arc::try_unwrap(timeline)
        .expect("the round's tasks are done")
        .into_inner()
        .unwrap();
    (timeline, guard)
}

/// How much later than `deadline` (the holder's) the key expires on the node serving it now
/// (zero if it expires later or nobody can say; the whole remaining time if it is not there).
async fn gap(probe: &Probe, deadline: Instant) -> Duration {
    let Some(port) = probe().await else {
        return Duration::ZERO;
    };
    let pttl = async {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let key = format!("distlock:{{{BELIEF_LOCK}}}");
        redis::cmd("PTTL")
            .arg(key)
            .query_async::<i64>(&mut conn)
            .await
            .ok()
    };
    // A frozen node answers nothing: no gap can be read from it.
    let Ok(Some(pttl)) = tokio::time::timeout(Duration::from_millis(200), pttl).await else {
        return Duration::ZERO;
    };
    let expires = Instant::now() + Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
    deadline.saturating_duration_since(expires)
}

/// One round (a fenced hold of `kind` of `ttl`, renewed if `renew`, held for `run`) on a
/// fresh server that is killed (`SIGKILL`) and started again on the same port 1 s in: it comes
/// back without the lock (no persistence), as a server restarted from a snapshot older than
/// the lock does.
pub async fn restart_round(kind: Kind, ttl: Duration, renew: bool, run: Duration) -> Timeline {
    let server = tokio::task::spawn_blocking(crate::server::RedisServer::start)
        .await
        .expect("start the server");
    let url = server.url();
    let server = Arc::new(Mutex::new(server));
    let round =
        Round::with_config(move || distlock::Config::new(url.clone()), ttl, renew, run).of(kind);
    let restarting = server.clone();
    let (timeline, _guard) = self::round(round, move || restarting.lock().unwrap().restart()).await;
    timeline
}
