//! What taking a hold counts: each acquire's outcome, waits and holds under its `lock` label
//! (the builder's, or the attribute's key template, never a rendered key), skips, a RedLock
//! quorum's waiters, and the `kind` label of each kind of hold.

use std::time::Duration;

use distlock::{distributed_lock, Config, Error};
use testkit::{eventually, take_and_release, RedisServer};

use crate::{
    acquires, client, counter, gauge, histogram, lock_labels, outcomes, recorded, seen, series,
};

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
    take_and_release(&a, "plain:7").await;
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
