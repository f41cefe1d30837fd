//! Lock metrics (feature `metrics`; `cargo test --test metrics --features metrics`) against a
//! real redis-server: the exact counts of scripted runs, read from `metrics-util`'s debugging
//! recorder installed as the process's global recorder (the watchdog renews on the client's own
//! runtime thread, which a thread-local recorder would not see).
//!
//! Each test uses its own `lock` labels, so tests running side by side in this process do not
//! touch each other's series; only `renewals_lease_loss_and_release_loss` renews leases, so the
//! unlabeled renewal series are its own.

use std::collections::BTreeMap;
use std::future::pending;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use distlock::{distributed_lock, Client, Config, Error, LossReason};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use redis::AsyncCommands;
use testkit::{eventually, RedisServer};

/// A series: metric name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What the recorder has seen so far. The debugging recorder's snapshots are destructive (they
/// swap counters and gauges to 0 and drain histograms), so the totals are folded in here; gauges
/// are only ever moved by `increment`/`decrement`, so their snapshots add up too.
#[derive(Default)]
struct Seen {
    counters: BTreeMap<Series, u64>,
    gauges: BTreeMap<Series, f64>,
    histograms: BTreeMap<Series, Vec<f64>>,
}

struct Recorded {
    snapshotter: Snapshotter,
    seen: Mutex<Seen>,
}

/// The process's recorder, installed on first use (before any lock is taken).
fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the only recorder of this test process");
        Recorded {
            snapshotter,
            seen: Mutex::default(),
        }
    })
}

/// Everything recorded until now.
fn seen() -> std::sync::MutexGuard<'static, Seen> {
    let recorded = recorded();
    let mut seen = recorded.seen.lock().unwrap();
    for (key, _, _, value) in recorded.snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let series = (key.name().to_owned(), labels);
        match (kind, value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                *seen.counters.entry(series).or_default() += n;
            }
            (MetricKind::Gauge, DebugValue::Gauge(delta)) => {
                *seen.gauges.entry(series).or_default() += delta.into_inner();
            }
            (MetricKind::Histogram, DebugValue::Histogram(values)) => seen
                .histograms
                .entry(series)
                .or_default()
                .extend(values.into_iter().map(|v| v.into_inner())),
            (kind, value) => panic!("{kind:?} with {value:?}"),
        }
    }
    seen
}

/// The series `name` with `labels`; one with a `lock` label and no `kind` is a lock's (kind
/// `lock`), as every lock of the tests that do not say otherwise.
fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let has = |key: &str| labels.iter().any(|(k, _)| k == key);
    if has("lock") && !has("kind") {
        labels.push(("kind".to_owned(), "lock".to_owned()));
    }
    labels.sort();
    (name.to_owned(), labels)
}

fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    seen()
        .counters
        .get(&series(name, labels))
        .copied()
        .unwrap_or(0)
}

fn gauge(name: &str, lock: &str) -> f64 {
    seen()
        .gauges
        .get(&series(name, &[("lock", lock)]))
        .copied()
        .unwrap_or(0.0)
}

fn histogram(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    seen()
        .histograms
        .get(&series(name, labels))
        .cloned()
        .unwrap_or_default()
}

/// `distlock_acquire_total{lock, outcome}`.
fn acquires(lock: &str, outcome: &str) -> u64 {
    counter(
        "distlock_acquire_total",
        &[("lock", lock), ("outcome", outcome)],
    )
}

/// Every `distlock_acquire_total` outcome of `lock`, in the order of the issue's list.
fn outcomes(lock: &str) -> [u64; 6] {
    [
        "acquired",
        "reentered",
        "busy",
        "skipped",
        "timeout",
        "error",
    ]
    .map(|o| acquires(lock, o))
}

fn renewals(outcome: &str) -> u64 {
    counter("distlock_renewals_total", &[("outcome", outcome)])
}

/// Every `lock` label value recorded in any series.
fn lock_labels() -> Vec<String> {
    let seen = seen();
    let names = seen
        .counters
        .keys()
        .chain(seen.gauges.keys())
        .chain(seen.histograms.keys());
    let mut labels: Vec<String> = names
        .flat_map(|(_, labels)| labels.iter().filter(|(k, _)| k == "lock"))
        .map(|(_, v)| v.clone())
        .collect();
    labels.sort();
    labels.dedup();
    labels
}

async fn client(server: &RedisServer) -> Client {
    Config::new(server.url()).connect().await.expect("connect")
}

/// The Redis key of the lock named `name` (default prefix).
fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

#[derive(Debug)]
struct AppError(#[allow(dead_code)] Error);

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError(e)
    }
}

/// Runs on one replica at a time; the others skip. Labelled with its template.
#[distributed_lock(key = "report:<day>", ttl = "10s", skip, client = "metrics-skip")]
async fn report(day: u32) -> Result<Option<u32>, AppError> {
    Ok(Some(day))
}

/// Waits for a busy lock; labelled with its template.
#[distributed_lock(
    key = "invoice:<id>",
    ttl = "10s",
    wait = "5s",
    client = "metrics-skip"
)]
async fn invoice(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[tokio::test]
async fn acquire_outcomes_waits_and_holds_are_counted_per_label() {
    recorded();
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    const JOB: &str = "job:<id>";

    // Acquired: held goes to 1.
    let first = a.lock("job:1").label(JOB).acquire().await.unwrap();
    assert_eq!(outcomes(JOB), [1, 0, 0, 0, 0, 0]);
    assert_eq!(gauge("distlock_held", JOB), 1.0);

    // Busy (another owner, no `wait`): nothing held or waiting added.
    let busy = b.lock("job:1").label(JOB).acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    assert_eq!(outcomes(JOB), [1, 0, 1, 0, 0, 0]);
    assert_eq!(gauge("distlock_held", JOB), 1.0);

    // Re-entered inside a body: counted as `reentered`, not held twice.
    a.lock("job:2")
        .label(JOB)
        .run(async {
            assert_eq!(gauge("distlock_held", JOB), 2.0);
            let inner = a.lock("job:2").label(JOB).acquire().await.unwrap();
            assert!(inner.is_reentry());
            assert_eq!(gauge("distlock_held", JOB), 2.0);
            inner.release().await.unwrap();
        })
        .await
        .unwrap();
    assert_eq!(outcomes(JOB), [2, 1, 1, 0, 0, 0]);
    assert_eq!(gauge("distlock_held", JOB), 1.0);

    // Wait, then acquire when the holder releases: one `distlock_wait_seconds` sample.
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.lock("job:1")
                .label(JOB)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    eventually(Duration::from_secs(5), "the waiter waits", || async {
        (gauge("distlock_waiting", JOB) == 1.0).then_some(())
    })
    .await;
    let waited_at_least = Duration::from_millis(50);
    tokio::time::sleep(waited_at_least).await;
    first.release().await.unwrap();
    let second = waiter.await.unwrap().expect("taken after the release");
    assert_eq!(outcomes(JOB), [3, 1, 1, 0, 0, 0]);
    assert_eq!(gauge("distlock_waiting", JOB), 0.0);
    assert_eq!(gauge("distlock_held", JOB), 1.0);
    let waits = histogram("distlock_wait_seconds", &[("lock", JOB)]);
    assert_eq!(waits.len(), 1, "only the acquire that waited: {waits:?}");
    assert!(waits[0] >= waited_at_least.as_secs_f64(), "{waits:?}");

    // Timeout: waited for `wait`, then gave up. No wait sample (it did not acquire).
    let timeout = a
        .lock("job:1")
        .label(JOB)
        .wait(Duration::from_millis(150))
        .acquire()
        .await
        .unwrap_err();
    assert!(timeout.is_busy(), "{timeout}");
    assert_eq!(outcomes(JOB), [3, 1, 1, 0, 1, 0]);
    assert_eq!(gauge("distlock_waiting", JOB), 0.0);
    assert_eq!(
        histogram("distlock_wait_seconds", &[("lock", JOB)]).len(),
        1
    );

    // Error: an invalid ttl.
    let invalid = a
        .lock("job:3")
        .label(JOB)
        .ttl(Duration::from_millis(1))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(invalid, Error::InvalidConfig { .. }), "{invalid}");
    assert_eq!(outcomes(JOB), [3, 1, 1, 0, 1, 1]);

    second.release().await.unwrap();
    assert_eq!(gauge("distlock_held", JOB), 0.0);
    // One hold sample per outer guard (job:1 twice, job:2 once); the re-entry adds none.
    let holds = histogram("distlock_hold_seconds", &[("lock", JOB)]);
    assert_eq!(holds.len(), 3, "{holds:?}");
    assert!(holds.iter().all(|&s| s >= 0.0), "{holds:?}");
    // Nothing was lost.
    for reason in ["expired", "stolen", "lease_elapsed"] {
        assert_eq!(
            counter("distlock_lost_total", &[("lock", JOB), ("reason", reason)]),
            0
        );
    }

    // Without a label: the bounded default, never the rendered key (other tests take
    // unlabeled locks too, so only "at least this one").
    let unlabeled = acquires("unlabeled", "acquired");
    a.lock("plain:7")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(acquires("unlabeled", "acquired") > unlabeled);
    let labels = lock_labels();
    assert!(labels.iter().any(|l| l == "unlabeled"), "{labels:?}");
    assert!(
        labels
            .iter()
            .all(|l| !l.ends_with(|c: char| c.is_ascii_digit())),
        "a rendered key became a label: {labels:?}"
    );
}

#[tokio::test]
async fn the_attribute_labels_with_its_template_and_counts_skips() {
    recorded();
    let server = RedisServer::start();
    Config::new(server.url())
        .install_as("metrics-skip")
        .await
        .unwrap();
    let other = client(&server).await;
    const REPORT: &str = "report:<day>";
    const INVOICE: &str = "invoice:<id>";

    assert_eq!(report(1).await.unwrap(), Some(1));
    assert_eq!(outcomes(REPORT), [1, 0, 0, 0, 0, 0]);

    // Busy on a `skip` function: `skipped`, not `busy`; the body did not run.
    let holder = other.lock("report:2").acquire().await.unwrap();
    assert_eq!(report(2).await.unwrap(), None);
    assert_eq!(outcomes(REPORT), [1, 0, 0, 1, 0, 0]);
    holder.release().await.unwrap();
    assert_eq!(report(2).await.unwrap(), Some(2));
    assert_eq!(outcomes(REPORT), [2, 0, 0, 1, 0, 0]);
    assert_eq!(gauge("distlock_held", REPORT), 0.0);
    assert_eq!(
        histogram("distlock_hold_seconds", &[("lock", REPORT)]).len(),
        2
    );

    // A `wait` function that waited: one wait sample under its template.
    let holder = other.lock("invoice:9").acquire().await.unwrap();
    let call = tokio::spawn(invoice(9));
    eventually(Duration::from_secs(5), "the call waits", || async {
        (gauge("distlock_waiting", INVOICE) == 1.0).then_some(())
    })
    .await;
    holder.release().await.unwrap();
    assert_eq!(call.await.unwrap().unwrap(), 9);
    assert_eq!(outcomes(INVOICE), [1, 0, 0, 0, 0, 0]);
    assert_eq!(gauge("distlock_waiting", INVOICE), 0.0);
    assert_eq!(
        histogram("distlock_wait_seconds", &[("lock", INVOICE)]).len(),
        1
    );

    // The rendered keys never became labels.
    let labels = lock_labels();
    for key in ["report:1", "report:2", "invoice:9"] {
        assert!(!labels.iter().any(|l| l == key), "{key} in {labels:?}");
    }
}

#[tokio::test]
async fn renewals_lease_loss_and_release_loss() {
    recorded();
    let server = RedisServer::start();
    let mut admin = server.conn().await;
    // A user whose script calls can be refused (ACL), to make renewals fail.
    let url = server
        .acl_user("locker", "locker-pass", &["~*", "&*", "+@all"])
        .await;
    let a = Config::new(url).connect().await.expect("connect as locker");
    let b = client(&server).await;
    const LEASE: &str = "lease:<n>";
    let lease = |name: &'static str| {
        a.lock(name)
            .label(LEASE)
            .ttl(Duration::from_millis(900))
            .renew(true)
            .acquire()
    };

    // Renewals succeed.
    let guard = lease("lease:1").await.unwrap();
    eventually(Duration::from_secs(5), "two renewals", || async {
        (renewals("ok") >= 2).then_some(())
    })
    .await;
    assert_eq!(renewals("failed"), 0);

    // Redis refuses this user's scripts: renewals fail (and are retried).
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "-evalsha", "-eval"])
        .query_async(&mut admin)
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "a failed renewal", || async {
        (renewals("failed") >= 1).then_some(())
    })
    .await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "+evalsha", "+eval"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let ok = renewals("ok");
    eventually(Duration::from_secs(5), "renewals succeed again", || async {
        (renewals("ok") > ok).then_some(())
    })
    .await;
    guard
        .ensure_held()
        .expect("a retried renewal kept the lease");
    assert_eq!(gauge("distlock_held", LEASE), 1.0);

    // The key is deleted while the lease is renewed: the next renewal finds it gone.
    let _: () = admin.del(lock_key("lease:1")).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("loss reported");
    assert_eq!(reason, LossReason::Expired);
    let expired = [("lock", LEASE), ("reason", "expired")];
    assert_eq!(counter("distlock_lost_total", &expired), 1);
    assert_eq!(renewals("lost"), 1);
    // A lost lock is no longer held, though its guard still exists.
    assert_eq!(gauge("distlock_held", LEASE), 0.0);
    let err = guard.release().await.unwrap_err();
    assert!(err.is_lost(), "{err}");
    assert_eq!(counter("distlock_lost_total", &expired), 1, "counted once");
    assert_eq!(gauge("distlock_held", LEASE), 0.0);

    // Taken by another owner while renewed (in one command, so that no renewal can find the
    // key gone in between): stolen.
    let guard = lease("lease:2").await.unwrap();
    assert_eq!(gauge("distlock_held", LEASE), 1.0);
    let _: () = redis::cmd("SET")
        .arg(lock_key("lease:2"))
        .arg("d2:another-owner")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut admin)
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("loss reported");
    assert_eq!(reason, LossReason::Stolen);
    let stolen = [("lock", LEASE), ("reason", "stolen")];
    assert_eq!(counter("distlock_lost_total", &stolen), 1);
    assert_eq!(renewals("lost"), 2);
    drop(guard);
    assert_eq!(gauge("distlock_held", LEASE), 0.0);
    assert_eq!(counter("distlock_lost_total", &expired), 1);
    assert_eq!(counter("distlock_lost_total", &stolen), 1);
    assert_eq!(
        histogram("distlock_hold_seconds", &[("lock", LEASE)]).len(),
        2
    );

    // Without renewal, a release that finds the lock taken over reports the loss.
    const RELEASE: &str = "release:<n>";
    let guard = a.lock("release:1").label(RELEASE).acquire().await.unwrap();
    let _: () = admin.del(lock_key("release:1")).await.unwrap();
    let thief = b.lock("release:1").acquire().await.unwrap();
    let err = guard.release().await.unwrap_err();
    assert!(matches!(err, Error::NotOwner { .. }), "{err}");
    let released_stolen = [("lock", RELEASE), ("reason", "stolen")];
    assert_eq!(counter("distlock_lost_total", &released_stolen), 1);
    assert_eq!(gauge("distlock_held", RELEASE), 0.0);
    thief.release().await.unwrap();

    // `run` sends its release without waiting: its confirmation is counted in the background,
    // `released` when the lock was still ours, `stolen` when another owner had it.
    const SENT: &str = "sent:<n>";
    let sent = |outcome| {
        counter(
            "distlock_sent_releases_total",
            &[("lock", SENT), ("outcome", outcome)],
        )
    };
    a.lock("sent:1").label(SENT).run(async {}).await.unwrap();
    eventually(
        Duration::from_secs(5),
        "the release is confirmed",
        || async { (sent("released") == 1).then_some(()) },
    )
    .await;
    let mut thief = None;
    a.lock("sent:2")
        .label(SENT)
        .run(async {
            let _: () = admin.del(lock_key("sent:2")).await.unwrap();
            thief = Some(b.lock("sent:2").acquire().await.unwrap());
        })
        .await
        .expect("decided when the body completed");
    eventually(
        Duration::from_secs(5),
        "the release finds the thief's lock",
        || async { (sent("stolen") == 1).then_some(()) },
    )
    .await;
    assert_eq!((sent("released"), sent("failed")), (1, 0));
    thief.unwrap().release().await.unwrap();

    // Every renewal attempt is in exactly one batch: outcomes add up to the batch sizes.
    let batches = histogram("distlock_renewal_batch_size", &[]);
    assert!(!batches.is_empty());
    assert!(batches.iter().all(|&n| n >= 1.0), "{batches:?}");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let leases: u64 = batches.iter().map(|&n| n as u64).sum();
    assert_eq!(
        leases,
        renewals("ok") + renewals("failed") + renewals("lost")
    );
}

#[tokio::test]
async fn held_and_waiting_return_to_zero_on_every_exit_path() {
    recorded();
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    const GONE: &str = "gone:<n>";

    // A waiter cancelled while it waits.
    let holder = a.lock("gone:1").label(GONE).acquire().await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.lock("gone:1")
                .label(GONE)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        })
    };
    eventually(Duration::from_secs(5), "the waiter waits", || async {
        (gauge("distlock_waiting", GONE) == 1.0).then_some(())
    })
    .await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(gauge("distlock_waiting", GONE), 0.0);

    // Two waiters, one after the other: both counted, both gone after the timeout.
    let wait = |b: Client| async move {
        b.lock("gone:1")
            .label(GONE)
            .wait(Duration::from_millis(300))
            .acquire()
            .await
    };
    let (x, y) = tokio::join!(wait(b.clone()), wait(b.clone()));
    assert!(x.unwrap_err().is_busy() && y.unwrap_err().is_busy());
    assert_eq!(acquires(GONE, "timeout"), 2);
    assert_eq!(gauge("distlock_waiting", GONE), 0.0);

    // A guard dropped without release.
    assert_eq!(gauge("distlock_held", GONE), 1.0);
    drop(holder);
    assert_eq!(gauge("distlock_held", GONE), 0.0);

    // A body cancelled while it runs under the lock.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        a.lock("gone:2").label(GONE).run(async {
            assert_eq!(gauge("distlock_held", GONE), 1.0);
            pending::<()>().await;
        }),
    )
    .await;
    assert!(cancelled.is_err());
    assert_eq!(gauge("distlock_held", GONE), 0.0);

    // A lease that ran out under a body (no renewal): lost, and not held.
    let elapsed = a
        .lock("gone:3")
        .label(GONE)
        .ttl(Duration::from_millis(100))
        .run(pending::<()>())
        .await
        .unwrap_err();
    assert!(elapsed.is_lost(), "{elapsed}");
    assert_eq!(
        counter(
            "distlock_lost_total",
            &[("lock", GONE), ("reason", "lease_elapsed")]
        ),
        1
    );
    assert_eq!(gauge("distlock_held", GONE), 0.0);

    // Many at once, each released or dropped: back to 0.
    let mut guards = Vec::new();
    for n in 0..5 {
        guards.push(
            a.lock(format!("gone:many:{n}"))
                .label(GONE)
                .acquire()
                .await
                .unwrap(),
        );
    }
    assert_eq!(gauge("distlock_held", GONE), 5.0);
    for (n, guard) in guards.into_iter().enumerate() {
        if n % 2 == 0 {
            guard.release().await.unwrap();
        } else {
            drop(guard);
        }
    }
    assert_eq!(gauge("distlock_held", GONE), 0.0);
    assert_eq!(gauge("distlock_waiting", GONE), 0.0);
    // acquired: gone:1, gone:2, gone:3 and five more; the cancelled waiter counted nothing.
    assert_eq!(outcomes(GONE), [8, 0, 0, 0, 2, 0]);

    // Concurrent tasks on one client (their acquires and releases go out in groups), half of
    // them on one contended lock with `wait`: every count exact, both gauges back to 0.
    const MANY: &str = "many:<n>";
    let tasks: Vec<_> = (0..32)
        .map(|n| {
            let a = a.clone();
            tokio::spawn(async move {
                let name = if n % 2 == 0 {
                    "many:hot".to_owned()
                } else {
                    format!("many:{n}")
                };
                a.lock(name)
                    .label(MANY)
                    .wait(Duration::from_secs(10))
                    .run(tokio::task::yield_now())
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(outcomes(MANY), [32, 0, 0, 0, 0, 0]);
    assert_eq!(gauge("distlock_held", MANY), 0.0);
    assert_eq!(gauge("distlock_waiting", MANY), 0.0);
    assert_eq!(
        histogram("distlock_hold_seconds", &[("lock", MANY)]).len(),
        32
    );
    let waits = histogram("distlock_wait_seconds", &[("lock", MANY)]).len();
    assert!(
        waits <= 15,
        "at most the 15 later takers of the hot lock waited: {waits}"
    );
}

/// Over a RedLock quorum a waiter is counted in `distlock_waiting` too, and its wait sampled.
#[tokio::test]
async fn waiting_over_a_redlock_quorum_is_counted() {
    recorded();
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = || async {
        Config::redlock(masters.iter().map(RedisServer::url))
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (quorum().await, quorum().await);
    const QUORUM: &str = "quorum:<id>";
    let first = a.lock("quorum:1").label(QUORUM).acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        b.lock("quorum:1")
            .label(QUORUM)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
    });
    eventually(Duration::from_secs(5), "the waiter waits", || async {
        (gauge("distlock_waiting", QUORUM) == 1.0).then_some(())
    })
    .await;
    first.release().await.unwrap();
    let second = waiter.await.unwrap().expect("taken after the release");
    assert_eq!(gauge("distlock_waiting", QUORUM), 0.0);
    assert_eq!(outcomes(QUORUM), [2, 0, 0, 0, 0, 0]);
    assert_eq!(
        histogram("distlock_wait_seconds", &[("lock", QUORUM)]).len(),
        1
    );
    second.release().await.unwrap();
    assert_eq!(gauge("distlock_held", QUORUM), 0.0);
}

/// A waiting acquire counts each transient failure it retries in
/// `distlock_acquire_retries_total`: exactly one per `READONLY` answer while the server is a
/// replica (a failover), none for the attempt that takes the lock or for a busy lock.
#[tokio::test]
async fn retried_transient_failures_are_counted() {
    recorded();
    let server = RedisServer::start();
    let c = client(&server).await;
    const RETRY: &str = "retry:<id>";
    let retries = || counter("distlock_acquire_retries_total", &[("lock", RETRY)]);

    server.demote().await;
    let before = server.error_replies("READONLY").await;
    let waiting = tokio::spawn({
        let c = c.clone();
        async move {
            c.lock("retry:1")
                .label(RETRY)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    eventually(Duration::from_secs(5), "two attempts refused", || async {
        (retries() >= 2).then_some(())
    })
    .await;
    server.promote().await;
    let guard = waiting.await.unwrap().expect("taken after the promotion");
    let refused = server.error_replies("READONLY").await - before;
    assert!(refused >= 2);
    assert_eq!(retries(), refused, "one retry per refused attempt");
    assert_eq!(outcomes(RETRY), [1, 0, 0, 0, 0, 0]);

    // A busy lock is waited for, not retried.
    let waiter = tokio::spawn({
        let c = c.clone();
        async move {
            c.lock("retry:1")
                .label(RETRY)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    eventually(Duration::from_secs(5), "the waiter waits", || async {
        (gauge("distlock_waiting", RETRY) == 1.0).then_some(())
    })
    .await;
    guard.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
    assert_eq!(retries(), refused, "no retry for a busy lock");
}

/// The `kind` label: a semaphore's permit, a read hold, a set of locks and a lock, each under
/// its own `lock` label, counted in their own series (held back to 0, holds recorded).
#[tokio::test]
async fn each_kind_of_hold_is_labeled_with_its_kind() {
    const KINDS: &str = "kinds:<id>";
    let server = RedisServer::start();
    let c = client(&server).await;
    let permit = c
        .semaphore("kinds:p", 2)
        .label(KINDS)
        .acquire()
        .await
        .unwrap();
    let read = c
        .lock("kinds:r")
        .read()
        .label(KINDS)
        .acquire()
        .await
        .unwrap();
    let set = c
        .lock_all(["kinds:a", "kinds:b"])
        .label(KINDS)
        .acquire()
        .await
        .unwrap();
    let lock = c.lock("kinds:l").label(KINDS).acquire().await.unwrap();
    for kind in ["permit", "read", "set", "lock"] {
        let labels = [("lock", KINDS), ("kind", kind)];
        let acquired = [("lock", KINDS), ("kind", kind), ("outcome", "acquired")];
        assert_eq!(counter("distlock_acquire_total", &acquired), 1, "{kind}");
        let held = seen()
            .gauges
            .get(&series("distlock_held", &labels))
            .copied();
        assert_eq!(held, Some(1.0), "{kind}");
    }
    for guard in [permit, read, set, lock] {
        guard.release().await.unwrap();
    }
    for kind in ["permit", "read", "set", "lock"] {
        let labels = [("lock", KINDS), ("kind", kind)];
        let held = seen()
            .gauges
            .get(&series("distlock_held", &labels))
            .copied();
        assert_eq!(held, Some(0.0), "{kind}");
        assert_eq!(
            histogram("distlock_hold_seconds", &labels).len(),
            1,
            "{kind}"
        );
    }
}

/// Every metric the runtime defines (`distlock-core/src/metrics.rs`) is in the "Metrics" table
/// of the crate docs and of `docs/observability.md`, and the tables name no other.
#[test]
fn every_metric_is_documented() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let source = read("distlock-core/src/metrics.rs");
    let defined: Vec<&str> = source
        .lines()
        .filter_map(|l| l.strip_prefix("pub(crate) const "))
        .filter_map(|l| l.split('"').nth(1))
        .filter(|name| name.starts_with("distlock_"))
        .collect();
    assert_eq!(defined.len(), 10, "{defined:?}");
    for (doc, text) in [
        ("distlock/src/lib.rs", read("distlock/src/lib.rs")),
        ("docs/observability.md", read("docs/observability.md")),
    ] {
        // The table rows: "| `distlock_...` |" (in the crate docs, after "//! ").
        let listed: Vec<&str> = text
            .lines()
            .map(|l| l.trim_start_matches("//!").trim_start())
            .filter_map(|l| l.strip_prefix("| `distlock_"))
            .filter_map(|l| l.split('`').next())
            .collect();
        for name in &defined {
            let name = name.trim_start_matches("distlock_");
            assert!(
                listed.contains(&name),
                "{doc} does not list distlock_{name}"
            );
        }
        assert_eq!(listed.len(), defined.len(), "{doc} lists {listed:?}");
    }
}
