//! Shared by rows 24f and 24c (an election through Sentinel failovers and through server clock
//! steps): the candidate processes, the suite's observer, what they said, and row 24's
//! invariants over it.
//!
//! A candidate (worker role `elector`) campaigns again and again through its own client (one
//! server or Sentinel; the row's ttl and `min_replicas`). It says `LEAD term= at=` when
//! elected, `HELD term= b= a=` every 10 ms while `ensure_held()` says `Ok` (the instants before
//! and after the check, Unix µs), `LOST term= at= why=` when `lost()` resolves, `RESIGNED term=
//! at=` when told to resign (the instant of the call), and for each item its own observer
//! yields `SAW term=`, `SAW vacant` or `SAW gap`.
//!
//! Invariants ([`check`]): every `Ok` of a term lies before every `Ok` of a later term (or,
//! where a row allows it, overlaps it by at most a bound); terms strictly rise in election
//! order; the suite's observer yields exactly the elected terms, and each candidate's a stretch
//! of them from the first it saw, in order (an explicit gap may skip terms).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{Client, Config, Observed, ALL_REPLICAS};
use futures_util::{Stream, StreamExt};
use testkit::RedisSentinel;
use tokio::task::JoinHandle;

use crate::bugs::Bug;
use crate::common::{lock_unpoisoned, ms};
use crate::report::Tally;
use crate::worker::{field_u64, fields, Ctx, Worker};

/// What an observer yielded, as the rows compare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A term: the leader of the moment, or one replayed from the record's history.
    Term(u64),
    /// No leader.
    Vacant,
    /// The observer says it may have missed terms here.
    Gap,
}

/// The only reader of `LeaderBuilder::observe()` in these rows: each item as a [`Seen`].
pub(crate) fn observe(client: &Client, name: &str) -> impl Stream<Item = Seen> + Send + 'static {
    client.leader(name).observe().map(|item| match item {
        Ok(Observed::Leader(leader) | Observed::Past(leader)) => Seen::Term(leader.term),
        Ok(Observed::Gap { .. }) => Seen::Gap,
        // `Vacant`, or the error that ends the stream (no client, an ACL): nobody seen.
        _ => Seen::Vacant,
    })
}

/// Now, Unix µs (the instants every line carries; the suite and its workers share the clock).
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The µs from `from` to `to` as a duration (zero if `to` is earlier).
pub(crate) fn span(from: u64, to: u64) -> Duration {
    Duration::from_micros(to.saturating_sub(from))
}

/// What one election's candidates said.
#[derive(Default)]
pub(crate) struct Log {
    /// (term, elected at µs, candidate)
    pub(crate) leads: Vec<(u64, u64, String)>,
    /// (term, before µs, after µs) of each `Ok` check.
    pub(crate) held: Vec<(u64, u64, u64)>,
    /// (term, at µs, why)
    pub(crate) lost: Vec<(u64, u64, String)>,
    /// (term, at µs)
    pub(crate) resigned: Vec<(u64, u64)>,
    /// (at µs, why) of each campaign that gave up (known bug B8).
    pub(crate) refused: Vec<(u64, String)>,
    /// Each candidate's observer: (candidate, what it yielded, in order).
    pub(crate) saw: Vec<(String, Vec<Seen>)>,
}

impl Log {
    /// The terms in election order (by the instant each candidate said it was elected).
    pub(crate) fn terms(&self) -> Vec<u64> {
        let mut leads: Vec<(u64, u64)> = self.leads.iter().map(|l| (l.1, l.0)).collect();
        leads.sort_unstable();
        leads.into_iter().map(|(_, term)| term).collect()
    }

    /// The first election after `at` µs: (term, at).
    pub(crate) fn lead_after(&self, at: u64) -> Option<(u64, u64)> {
        self.leads
            .iter()
            .filter(|l| l.1 > at)
            .min_by_key(|l| l.1)
            .map(|l| (l.0, l.1))
    }

    /// The last `Ok` check of `term` (its after-instant).
    pub(crate) fn last_ok(&self, term: u64) -> Option<u64> {
        self.held.iter().filter(|h| h.0 == term).map(|h| h.2).max()
    }

    /// When `term` was said lost, and why.
    pub(crate) fn lost_of(&self, term: u64) -> Option<(u64, &str)> {
        self.lost
            .iter()
            .find(|l| l.0 == term)
            .map(|l| (l.1, l.2.as_str()))
    }

    /// Per term (in term order), how long an earlier term's `Ok` checks ran past its first
    /// `Ok` check: (earlier term, term, overlap), for every overlap.
    pub(crate) fn overlaps(&self) -> Vec<(u64, u64, Duration)> {
        let mut spans: Vec<(u64, u64, u64)> = Vec::new();
        for &(term, before, after) in &self.held {
            match spans.iter_mut().find(|s| s.0 == term) {
                Some(s) => {
                    s.1 = s.1.min(before);
                    s.2 = s.2.max(after);
                }
                None => spans.push((term, before, after)),
            }
        }
        spans.sort_unstable();
        let mut out = Vec::new();
        let mut latest: Option<(u64, u64)> = None; // (term, its last Ok)
        for &(term, first, last) in &spans {
            if let Some((earlier, end)) = latest {
                if end > first {
                    out.push((earlier, term, span(first, end)));
                }
            }
            if latest.is_none_or(|(_, end)| last > end) {
                latest = Some((term, last));
            }
        }
        out
    }
}

/// One election of a row: its candidates, what they said, and the suite's observer.
pub(crate) struct Election {
    /// How the row's messages name it (its `min_replicas`, its deployment).
    pub(crate) label: String,
    name: String,
    /// The suite's client, which observes and asks who leads.
    client: Client,
    candidates: Vec<Worker>,
    log: Arc<Mutex<Log>>,
    /// What the suite's observer yielded, with when (µs).
    observed: Arc<Mutex<Vec<(Seen, u64)>>>,
    observer: JoinHandle<()>,
}

/// The parameters of the candidates of one election (the worker's `params`).
pub(crate) struct Campaign<'a> {
    /// `url` (one server) or `sentinel`.
    pub(crate) kind: &'a str,
    /// The server's URL, or the sentinels' (comma-separated).
    pub(crate) urls: String,
    pub(crate) name: String,
    pub(crate) ttl: Duration,
    /// `min_replicas`: a count, or [`ALL_REPLICAS`].
    pub(crate) replicas: usize,
    /// How long `WAIT` waits for them ([`REPLICA_TIMEOUT`] unless replication lags).
    pub(crate) replica_timeout: Duration,
}

impl Election {
    /// Starts the suite's observer (through `observer_client`) and `candidates` candidate
    /// processes.
    pub(crate) fn start(
        label: impl Into<String>,
        observer_client: &Client,
        campaign: &Campaign<'_>,
        candidates: usize,
    ) -> Election {
        let observed = Arc::new(Mutex::new(Vec::new()));
        let observer = tokio::spawn({
            let stream = observe(observer_client, &campaign.name);
            let observed = observed.clone();
            async move {
                let mut stream = Box::pin(stream);
                while let Some(seen) = stream.next().await {
                    lock_unpoisoned(&observed).push((seen, now_us()));
                }
            }
        });
        let replicas = match campaign.replicas {
            ALL_REPLICAS => "all".to_owned(),
            n => n.to_string(),
        };
        let candidates = (0..candidates)
            .map(|n| {
                let params = [
                    ("kind", campaign.kind.to_owned()),
                    ("urls", campaign.urls.clone()),
                    ("name", campaign.name.clone()),
                    ("ttl_ms", campaign.ttl.as_millis().to_string()),
                    ("replicas", replicas.clone()),
                    (
                        "replica_timeout_ms",
                        campaign.replica_timeout.as_millis().to_string(),
                    ),
                    ("identity", format!("candidate-{n}")),
                ];
                Worker::spawn(format!("{}-{n}", campaign.name), "elector", &params)
            })
            .collect();
        Election {
            label: label.into(),
            name: campaign.name.clone(),
            client: observer_client.clone(),
            candidates,
            log: Arc::new(Mutex::new(Log::default())),
            observed,
            observer,
        }
    }

    /// Records every line the candidates said so far.
    pub(crate) async fn read(&mut self) {
        for c in &mut self.candidates {
            while let Some(line) = c.next_line(Duration::from_millis(1)).await {
                record(&self.log, c.name(), &line);
            }
        }
    }

    /// The log so far (read first).
    pub(crate) fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        lock_unpoisoned(&self.log)
    }

    /// Reads lines until `done` says so of the log, or `within` passes (false then).
    pub(crate) async fn until(&mut self, within: Duration, done: impl Fn(&Log) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            self.read().await;
            if done(&self.log()) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// [`Election::until`], reading every millisecond: for a row that must act the moment a
    /// line is said.
    pub(crate) async fn until_quick(
        &mut self,
        within: Duration,
        done: impl Fn(&Log) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            for c in &mut self.candidates {
                while let Some(line) = c.next_line(Duration::ZERO).await {
                    record(&self.log, c.name(), &line);
                }
            }
            if done(&self.log()) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits for an election after `at` µs (`0`: any): its (term, candidate index); a violation
    /// if none comes within `within`.
    pub(crate) async fn lead_after(
        &mut self,
        t: &Tally,
        at: u64,
        within: Duration,
    ) -> Option<(u64, usize)> {
        if !self.until(within, |log| log.lead_after(at).is_some()).await {
            t.violation(format!(
                "{}: no leader elected within {within:?}",
                self.label
            ));
            return None;
        }
        let log = self.log();
        let (term, _) = log.lead_after(at)?;
        let who = &log.leads.iter().find(|l| l.0 == term)?.2;
        let index = self.candidates.iter().position(|c| c.name() == who)?;
        Some((term, index))
    }

    /// Tells candidate `index` to resign.
    pub(crate) async fn resign(&mut self, index: usize) {
        self.candidates[index].send("resign").await;
    }

    /// Waits (up to `within`) until the suite's observer yielded the last elected term, asks
    /// who leads (`current()`), then stops every candidate and the observer.
    pub(crate) async fn finish(mut self, t: &Tally, within: Duration) -> Ended {
        self.read().await;
        let last = self.log().terms().last().copied();
        let deadline = tokio::time::Instant::now() + within;
        while let Some(last) = last {
            let seen = lock_unpoisoned(&self.observed)
                .iter()
                .any(|(s, _)| *s == Seen::Term(last));
            if seen {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                t.violation(format!(
                    "{}: the suite's observer did not yield the last term {last} within {within:?}",
                    self.label
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let asked_at = now_us();
        let builder = self.client.leader(self.name.clone());
        let current = match tokio::time::timeout(Duration::from_secs(5), builder.current()).await {
            Ok(Ok(leader)) => Ok(leader.map(|l| l.term)),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("no answer within 5 s".to_owned()),
        };
        self.read().await;
        for c in &mut self.candidates {
            // A candidate that gave up (or panicked) says so on stderr before it exits.
            let stderr = c.stderr_tail();
            t.check(stderr.is_empty(), || {
                format!("{}: {} stopped campaigning: {stderr}", self.label, c.name())
            });
            c.kill().await;
        }
        self.read().await;
        self.observer.abort();
        Ended {
            observed: std::mem::take(&mut *lock_unpoisoned(&self.observed)),
            log: std::mem::take(&mut *lock_unpoisoned(&self.log)),
            current: (asked_at, current),
        }
    }
}

/// What an election left when its row stopped it.
pub(crate) struct Ended {
    pub(crate) log: Log,
    /// What the suite's observer yielded, with when (µs).
    pub(crate) observed: Vec<(Seen, u64)>,
    /// When the suite asked who leads (`current()`), and the term it was told.
    pub(crate) current: (u64, Result<Option<u64>, String>),
}

/// The record names the leader of the moment: `current()`, asked at the end, names the last
/// term elected before it was asked, unless that term ended (`LOST`, `RESIGNED`) by the end.
/// A violation that `bug` explains counts as known.
pub(crate) fn check_record(t: &Tally, label: &str, ended: &Ended, bug: Option<&'static Bug>) {
    let (asked_at, current) = &ended.current;
    let log = &ended.log;
    let leading = log
        .leads
        .iter()
        .filter(|l| l.1 < *asked_at)
        .max_by_key(|l| l.1)
        .map(|l| l.0)
        .filter(|&term| log.lost_of(term).is_none() && !log.resigned.iter().any(|r| r.0 == term));
    let Some(term) = leading else { return };
    let ok = *current == Ok(Some(term));
    let what =
        || format!("{label}: term {term} leads, but the record names {current:?} (`current()`)");
    match bug {
        Some(bug) => t.check_known(bug, ok, what),
        None => t.check(ok, what),
    };
}

/// Records a candidate's line.
fn record(log: &Mutex<Log>, who: &str, line: &str) {
    let f = fields(line);
    let num = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let mut log = lock_unpoisoned(log);
    let kind = line.split_whitespace().next().unwrap_or("");
    match kind {
        "LEAD" => log
            .leads
            .push((field_u64(line, "term"), num("at"), who.to_owned())),
        "HELD" => log.held.push((num("term"), num("b"), num("a"))),
        "LOST" => log.lost.push((num("term"), num("at"), why(line))),
        "RESIGNED" => log.resigned.push((num("term"), num("at"))),
        "REFUSED" => log.refused.push((num("at"), why(line))),
        "SAW" => {
            let seen = match f.get("term") {
                Some(_) => Seen::Term(num("term")),
                None if line.contains("gap") => Seen::Gap,
                None => Seen::Vacant,
            };
            match log.saw.iter_mut().find(|(name, _)| name == who) {
                Some((_, saw)) => saw.push(seen),
                None => log.saw.push((who.to_owned(), vec![seen])),
            }
        }
        _ => {}
    }
}

/// The rest of a line after its `why=` (a reason, an error's message: the line's last field).
fn why(line: &str) -> String {
    line.split_once(" why=")
        .map_or("?", |(_, why)| why)
        .to_owned()
}

/// What [`check`] measured of one election.
pub(crate) struct Checked {
    pub(crate) terms: usize,
    pub(crate) oks: usize,
    /// The longest overlap of two terms' `Ok` checks.
    pub(crate) worst_overlap: Duration,
    /// The observers' items (the suite's, then every candidate's).
    pub(crate) observed: usize,
    /// The longest from a candidate's election to the suite's observer yielding its term.
    pub(crate) observer_lag: Duration,
}

/// Row 24's invariants over one election's log: terms strictly rising in election order; no
/// two terms' `Ok` checks overlapping by more than `overlap_allowed` (zero: one leader at a
/// time); the suite's observer yielding every elected term in order, each within
/// `observer_within` of its election, and each candidate's observer a stretch of them (an
/// explicit gap may skip terms).
pub(crate) fn check(
    t: &Tally,
    label: &str,
    ended: &Ended,
    (overlap_allowed, observer_within): (Duration, Duration),
) -> Checked {
    let (log, observed) = (&ended.log, &ended.observed[..]);
    let terms = log.terms();
    t.ops(terms.len() as u64 + log.held.len() as u64);
    t.check(terms.windows(2).all(|w| w[1] > w[0]), || {
        format!("{label}: terms not strictly increasing in election order: {terms:?}")
    });
    let overlaps = log.overlaps();
    let worst_overlap = overlaps.iter().map(|o| o.2).max().unwrap_or_default();
    t.check(worst_overlap <= overlap_allowed, || {
        format!(
            "{label}: two leaders said Ok at once (allowed: {} ms): {:?}",
            ms(overlap_allowed),
            overlaps
                .iter()
                .map(|(a, b, d)| format!("term {a} Ok {} ms into term {b}", ms(*d)))
                .collect::<Vec<_>>()
        )
    });
    t.check(log.refused.is_empty(), || {
        format!(
            "{label}: {} campaigns gave up (a candidate campaigned again), the first: {}",
            log.refused.len(),
            log.refused[0].1
        )
    });
    let suite: Vec<Seen> = observed.iter().map(|(s, _)| *s).collect();
    t.check(sees_every_term(&suite, &terms, true), || {
        format!("{label}: the suite's observer yielded {suite:?}, the candidates were elected with {terms:?}")
    });
    for (who, saw) in &log.saw {
        t.check(sees_every_term(saw, &terms, false), || {
            format!("{label}: {who}'s observer yielded {saw:?}, the candidates were elected with {terms:?}")
        });
    }
    // Keeping up: each term yielded soon after its election (a wake missed, the observer looks
    // again when the lease it read runs out).
    let lags: Vec<(u64, Duration)> = log
        .leads
        .iter()
        .filter_map(|&(term, elected, _)| {
            let seen = observed.iter().find(|(s, _)| *s == Seen::Term(term))?;
            Some((term, span(elected, seen.1)))
        })
        .collect();
    let observer_lag = lags.iter().map(|l| l.1).max().unwrap_or_default();
    t.check(observer_lag <= observer_within, || {
        format!(
            "{label}: the suite's observer yielded a term {} ms after its election (bound {} ms): {lags:?}",
            ms(observer_lag),
            ms(observer_within)
        )
    });
    Checked {
        observer_lag,
        terms: terms.len(),
        oks: log.held.len(),
        worst_overlap,
        observed: suite.len() + log.saw.iter().map(|(_, saw)| saw.len()).sum::<usize>(),
    }
}

/// True if the terms in `saw` are `terms` in order, none repeated or skipped except at a
/// [`Seen::Gap`]; with `all`, from the first elected term to the last (an observer there from
/// the start to the end), else from the first it saw to the last (it started late or died
/// early).
fn sees_every_term(saw: &[Seen], terms: &[u64], all: bool) -> bool {
    let mut next: Option<usize> = all.then_some(0); // index in `terms` of the term due next
    let mut after_gap = false;
    for seen in saw {
        match *seen {
            Seen::Vacant => {}
            Seen::Gap => after_gap = true,
            Seen::Term(term) => {
                let Some(at) = terms.iter().position(|&x| x == term) else {
                    return false; // a term nobody was elected with
                };
                let in_order = match next {
                    None => true,
                    Some(due) if after_gap => at >= due,
                    Some(due) => at == due,
                };
                if !in_order {
                    return false;
                }
                next = Some(at + 1);
                after_gap = false;
            }
        }
    }
    !all || next == Some(terms.len())
}

/// How long the candidates' and observers' clients wait for a reply.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long `WAIT` waits for the replicas of `min_replicas` (200 ms: a healthy replica on this
/// machine acknowledges within a millisecond).
pub(crate) const REPLICA_TIMEOUT: Duration = Duration::from_millis(200);

/// A client of the deployment (`url`: one server; `sentinel`: the sentinels' URLs).
pub(crate) async fn connect(kind: &str, urls: &str) -> Result<Client, distlock::Error> {
    connect_with(kind, urls, REPLICA_TIMEOUT).await
}

/// [`connect`] with another replica timeout.
async fn connect_with(
    kind: &str,
    urls: &str,
    replica_timeout: Duration,
) -> Result<Client, distlock::Error> {
    let list: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let config = match kind {
        "sentinel" => Config::sentinel(list, RedisSentinel::SERVICE),
        _ => Config::new(list[0].clone()),
    };
    config
        .response_timeout(RESPONSE_TIMEOUT)
        .replica_timeout(replica_timeout)
        .connect()
        .await
}

/// Worker role `elector`: campaigns again and again; while leading says `HELD` every 10 ms its
/// check says `Ok`, resigns when told, says `LOST` and campaigns again when leadership is lost;
/// says `SAW` for each item its observer yields.
pub(crate) async fn worker(mut ctx: Ctx) -> Result<(), String> {
    let replica_timeout = Duration::from_millis(ctx.num("replica_timeout_ms"));
    let client = connect_with(ctx.param("kind"), ctx.param("urls"), replica_timeout)
        .await
        .map_err(|e| e.to_string())?;
    let name = ctx.param("name").to_owned();
    let identity = ctx.param("identity").to_owned();
    let ttl = Duration::from_millis(ctx.num("ttl_ms"));
    let replicas = match ctx.param("replicas") {
        "all" => ALL_REPLICAS,
        _ => ctx.num("replicas") as usize,
    };
    let seen = observe(&client, &name);
    tokio::spawn(async move {
        let mut stream = Box::pin(seen);
        while let Some(seen) = stream.next().await {
            Ctx::say_to_suite(match seen {
                Seen::Term(term) => format!("SAW term={term}"),
                Seen::Vacant => "SAW vacant".to_owned(),
                Seen::Gap => "SAW gap".to_owned(),
            });
        }
    });
    loop {
        let campaign = client
            .leader(name.clone())
            .ttl(ttl)
            .min_replicas(replicas)
            .identity(identity.clone())
            .campaign()
            .await;
        let leadership = match campaign {
            Ok(leadership) => leadership,
            // `campaign()` waits out an election too few replicas acknowledged (right after a
            // Sentinel switch, every acquire is unreplicated until the sentinels list the new
            // master's replicas); one that gives up with it is a regression (B8, fixed): said,
            // counted as a violation, and campaigned again.
            Err(error @ distlock::Error::Unreplicated { .. }) => {
                ctx.say(format!("REFUSED at={} why={error}", now_us()));
                continue;
            }
            Err(error) => return Err(error.to_string()),
        };
        lead(&mut ctx, leadership).await;
    }
}

/// Leads as row 24's candidates do, until the term ends: `LEAD` first, `HELD` (with the
/// instants before and after the check) every 10 ms while `ensure_held()` says `Ok`, `RESIGNED`
/// when the suite says `resign`, `LOST` (with why) when the term is lost.
pub(crate) async fn lead(ctx: &mut Ctx, leadership: distlock::Leadership) {
    let term = leadership.term();
    ctx.say(format!("LEAD term={term} at={}", now_us()));
    let lost = leadership.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            command = ctx.command() => {
                if command == "resign" {
                    // From the call: the next leader may be elected before its reply.
                    let at = now_us();
                    let _ = leadership.resign().await;
                    ctx.say(format!("RESIGNED term={term} at={at}"));
                    return;
                }
            }
            reason = &mut lost => {
                ctx.say(format!("LOST term={term} at={} why={reason:?}", now_us()));
                return;
            }
            () = tokio::time::sleep(Duration::from_millis(10)) => {
                let before = now_us();
                if leadership.ensure_held().is_ok() {
                    ctx.say(format!("HELD term={term} b={before} a={}", now_us()));
                }
            }
        }
    }
}
