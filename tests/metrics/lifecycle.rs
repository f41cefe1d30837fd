//! What a hold counts once it is taken: renewals (ok, failed, lost; each one's margin and the
//! hold's age in ttls), a lease lost and a release that found the lock gone, retried transient
//! failures, and the `held` and `waiting` gauges back to 0 on every way out of a hold or a wait.

use std::future::pending;
use std::time::Duration;

use distlock::{Client, Config, Error, LockGuard, LossReason};
use redis::AsyncCommands;
use testkit::{eventually, RedisServer};
use tokio::task::JoinHandle;

use crate::{
    acquires, client, counter, gauge, histogram, lock_key, outcomes, recorded, renewals, seen,
    series,
};

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

    // Each renewal answered records the margin the lease had left (on time: about 2/3 of the
    // ttl) and the hold's age in ttls (a third of a ttl more at each).
    let margins = histogram("distlock_renewal_margin_ratio", &[("lock", LEASE)]);
    let ages = histogram("distlock_hold_ttl_ratio", &[("lock", LEASE)]);
    assert!(margins.len() >= 2, "{margins:?}");
    assert!(
        margins.iter().all(|m| (0.4..=1.0).contains(m)),
        "{margins:?}"
    );
    assert!(ages.iter().all(|&a| a > 0.2), "{ages:?}");
    assert!(ages.iter().any(|&a| a > 0.6), "{ages:?}");

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

    // A lock handed over by a release runs on its grant window (1 s) until its first
    // extension, which finds what is left of the window, not of a ttl: no late renewal, and
    // not counted as one (0.67 s of a 3 s ttl would read as a margin of 0.22).
    const HANDED: &str = "handed:<n>";
    let ttl = Duration::from_secs(3);
    let holder = a.lock("handed:1").label(HANDED).ttl(ttl).acquire().await;
    let holder = holder.unwrap();
    let b2 = b.clone();
    let waiter = tokio::spawn(async move {
        let lock = b2.lock("handed:1").label(HANDED).ttl(ttl).renew(true);
        lock.wait(Duration::from_secs(5)).acquire().await
    });
    testkit::until_queued(&admin, "handed:1", 1).await;
    holder.release().await.unwrap();
    let handed = waiter.await.unwrap().expect("handed the lock");
    let margins = eventually(Duration::from_secs(5), "a renewal", || async {
        let margins = histogram("distlock_renewal_margin_ratio", &[("lock", HANDED)]);
        (!margins.is_empty()).then_some(margins)
    })
    .await;
    assert!(margins.iter().all(|&m| m >= 0.4), "{margins:?}");
    handed.release().await.unwrap();

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
    let waiter = waiting_task(&b, "gone:1", GONE, Duration::from_secs(30));
    until_waiting(GONE).await;
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
    let waiting = waiting_task(&c, "retry:1", RETRY, Duration::from_secs(10));
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
    let waiter = waiting_task(&c, "retry:1", RETRY, Duration::from_secs(10));
    until_waiting(RETRY).await;
    guard.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
    assert_eq!(retries(), refused, "no retry for a busy lock");
}

/// A task that takes `name` (metrics label `label`) through `c`, waiting up to `wait`.
fn waiting_task(
    c: &Client,
    name: &'static str,
    label: &'static str,
    wait: Duration,
) -> JoinHandle<Result<LockGuard, Error>> {
    let c = c.clone();
    tokio::spawn(async move { c.lock(name).label(label).wait(wait).acquire().await })
}

/// Until one acquire labelled `label` waits (`distlock_waiting`).
async fn until_waiting(label: &str) {
    eventually(Duration::from_secs(5), "the waiter waits", || async {
        (gauge("distlock_waiting", label) == 1.0).then_some(())
    })
    .await;
}

/// A leader's term: `distlock_leader` 1 while it lasts and 0 after, each term counted once
/// (the default ttl: no renewal happens, so the unlabeled renewal series stay the other test's).
#[tokio::test]
async fn a_leaders_terms_are_counted_and_its_gauge_returns_to_zero() {
    recorded();
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "metrics-leader";
    let leading = || {
        crate::seen()
            .gauges
            .get(&crate::series("distlock_leader", &[("name", name)]))
            .copied()
            .unwrap_or(0.0)
    };
    for term in 1..=2u64 {
        let leadership = c.leader(name).campaign().await.unwrap();
        assert_eq!(leading(), 1.0, "term {term}");
        leadership.resign().await.unwrap();
        assert_eq!(leading(), 0.0, "term {term} resigned");
        assert_eq!(
            counter("distlock_leader_terms_total", &[("name", name)]),
            term
        );
    }
    let dropped = c.leader(name).campaign().await.unwrap();
    drop(dropped);
    assert_eq!(leading(), 0.0, "a dropped leadership");
    assert_eq!(
        counter(
            "distlock_leader_lost_total",
            &[("name", name), ("reason", "expired")]
        ),
        0,
        "resigned and dropped terms are not lost"
    );
}

/// An election's lock is labelled with the election's name and kind `leader` (not
/// `unlabeled`, kind `lock`), in every series of a hold: acquired, held, and lost (here found
/// gone by the resign's release: the default ttl, so no renewal happens, and the unlabeled
/// renewal series stay the other test's).
#[tokio::test]
async fn an_elections_lock_carries_its_name_and_kind_leader() {
    recorded();
    let server = RedisServer::start();
    let c = client(&server).await;
    let name = "metrics-election";
    let labels = [("lock", name), ("kind", "leader")];
    let held = || {
        seen()
            .gauges
            .get(&series("distlock_held", &labels))
            .copied()
            .unwrap_or(0.0)
    };
    let leadership = c.leader(name).campaign().await.unwrap();
    let acquired = [("lock", name), ("kind", "leader"), ("outcome", "acquired")];
    assert_eq!(counter("distlock_acquire_total", &acquired), 1);
    assert_eq!(held(), 1.0);
    let _: () = server.conn().await.del(lock_key(name)).await.unwrap();
    let _ = leadership.resign().await;
    assert_eq!(held(), 0.0);
    let expired = [("lock", name), ("kind", "leader"), ("reason", "expired")];
    assert_eq!(counter("distlock_lost_total", &expired), 1);
    for reason in ["stolen", "unreachable", "lease_elapsed"] {
        let zero = [("lock", name), ("kind", "leader"), ("reason", reason)];
        assert!(
            seen().counters.get(&series("distlock_lost_total", &zero)) == Some(&0),
            "{reason}: at 0 from the first term"
        );
    }
}

/// The rare counters of a lock are there at 0 from its first hold (a series first seen at 1 is
/// an increase `increase()` never sees): a loss for every reason, a sent release for every
/// outcome; an election's lost terms from its first term.
#[tokio::test]
async fn rare_counters_start_at_zero() {
    recorded();
    let server = RedisServer::start();
    let c = client(&server).await;
    const RARE: &str = "rare:<n>";
    let exists = |name: &str, labels: &[(&str, &str)]| {
        seen()
            .counters
            .get(&series(name, labels))
            .is_some_and(|&n| n == 0)
    };
    let reasons = [
        "expired",
        "stolen",
        "unreachable",
        "lease_elapsed",
        "refused",
        "unreplicated",
    ];
    assert!(!exists(
        "distlock_lost_total",
        &[("lock", RARE), ("reason", "expired")]
    ));
    c.lock("rare:1").label(RARE).acquire().await.unwrap();
    for reason in reasons {
        let labels = [("lock", RARE), ("reason", reason)];
        assert!(exists("distlock_lost_total", &labels), "{reason}");
    }
    for outcome in ["released", "expired", "stolen", "failed"] {
        let labels = [("lock", RARE), ("outcome", outcome)];
        assert!(exists("distlock_sent_releases_total", &labels), "{outcome}");
    }
    let leading = c.leader("rare-election").campaign().await.unwrap();
    for reason in reasons {
        let labels = [("name", "rare-election"), ("reason", reason)];
        assert!(exists("distlock_leader_lost_total", &labels), "{reason}");
    }
    leading.resign().await.unwrap();
}
