//! Permits (`distlock::semaphore(name, n)`) against real servers: at most `n` bodies at once
//! across clients and processes (and reaching `n`), the count agreed by every user, the kinds
//! excluding each other, a killed holder's permit freed at its ttl, renewal, a stalled holder
//! told `Lost`, waiters woken by a release, re-entry, fencing, bounded memory; on a cluster and
//! through Sentinel (a failover) too.
//!
//! The process tests start this test binary again as a holder (`PERMIT_CHILD` names the
//! semaphore; see [`child_holder`]), which a test `SIGKILL`s or `SIGSTOP`s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{Config, Error, HeldBy, LossReason};
use redis::AsyncCommands;
use testkit::{
    eventually, permit_race, quick_client as client, ChildTest, RedisCluster, RedisSentinel,
    RedisServer,
};
use tokio::time::Instant;

/// The semaphore's key and its count member (see the wire protocol's "Permits").
fn key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// Live holders recorded in the semaphore's sorted set (its count member aside).
async fn holders(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    let members: Vec<String> = conn.zrange(key(name), 0, -1).await.unwrap();
    members.into_iter().filter(|m| m != "d2:permits").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_n_bodies_at_once_across_clients_and_n_is_reached() {
    let server = RedisServer::start();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let most = permit_race(&clients, (4, 10), ("api:race", 3), Duration::from_millis(5)).await;
    assert_eq!(most, 3, "never more than 3 inside, and 3 reached");
    // `run` sends its release without waiting for it: settled, every release was answered.
    for c in &clients {
        c.settle().await;
    }
    let mut conn = server.conn().await;
    assert!(
        !conn.exists::<_, bool>(key("api:race")).await.unwrap(),
        "the last release deletes the semaphore"
    );
    // One permit is a mutex.
    assert_eq!(
        permit_race(&clients, (3, 5), ("api:one", 1), Duration::from_millis(5)).await,
        1
    );
}

#[tokio::test]
async fn the_count_is_agreed_and_never_resized() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let held = a.semaphore("api:n", 3).acquire().await.unwrap();
    assert_eq!(held.permits(), Some(3));
    let err = b.semaphore("api:n", 4).acquire().await.unwrap_err();
    assert!(
        matches!(&err, Error::PermitsMismatch { key, asked: 4, held: 3 } if key == "api:n"),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains('3') && text.contains('4'), "{text}");
    // The same count shares the semaphore.
    let second = b.semaphore("api:n", 3).acquire().await.unwrap();
    second.release().await.unwrap();
    held.release().await.unwrap();
    // Nobody holds it: the next holder's count stands.
    let four = b.semaphore("api:n", 4).acquire().await.unwrap();
    let err = a.semaphore("api:n", 3).acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PermitsMismatch {
                asked: 3,
                held: 4,
                ..
            }
        ),
        "{err}"
    );
    four.release().await.unwrap();
    // Zero permits is refused before anything is sent.
    let err = a.semaphore("api:zero", 0).acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
}

#[tokio::test]
async fn a_lock_and_a_semaphore_of_one_name_exclude_each_other() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.lock("shared").acquire().await.unwrap();
    let err = b.semaphore("shared", 2).acquire().await.unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    lock.release().await.unwrap();

    let permit = a.semaphore("shared", 2).acquire().await.unwrap();
    for fenced in [false, true] {
        let err = b.lock("shared").fenced(fenced).acquire().await.unwrap_err();
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    }
    // A lock value renewed or released on a semaphore's key changes nothing there.
    let mut conn = server.conn().await;
    assert_eq!(holders(&mut conn, "shared").await.len(), 1);
    permit.release().await.unwrap();
    // A sorted set that is no semaphore is not misread either.
    let _: () = conn.zadd(key("other"), "x", 1).await.unwrap();
    let err = a.semaphore("other", 2).acquire().await.unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
}

#[tokio::test]
async fn a_permit_is_leased_renewed_and_its_holders_are_bounded() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    // Renewed past several ttls, the permit stays ours.
    let renewed = a
        .semaphore("api:lease", 1)
        .ttl(Duration::from_millis(300))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    renewed.ensure_held().unwrap();
    let err = b.semaphore("api:lease", 1).acquire().await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    renewed.release().await.unwrap();

    // A holder that never releases (nor renews) frees its permit at its ttl, and the next
    // acquire removes it: no sweeper, and the set keeps only live holders.
    let gone = a
        .semaphore("api:lease", 2)
        .ttl(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    std::mem::forget(gone);
    let stays = a
        .semaphore("api:lease", 2)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert_eq!(holders(&mut conn, "api:lease").await.len(), 2);
    let err = b.semaphore("api:lease", 2).acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Busy {
                held_by: HeldBy::Permits { permits: 2 },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "semaphore `api:lease` is busy: all 2 permits are in use (set `wait` to wait for a release, or retry later)"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = b.semaphore("api:lease", 2).acquire().await.unwrap();
    assert_eq!(holders(&mut conn, "api:lease").await.len(), 2);
    // The key expires with its latest lease.
    let pttl: i64 = conn.pttl(key("api:lease")).await.unwrap();
    assert!((29_000..=30_000).contains(&pttl), "pttl {pttl}");
    third.release().await.unwrap();
    stays.release().await.unwrap();
    assert!(!conn.exists::<_, bool>(key("api:lease")).await.unwrap());
}

#[tokio::test]
async fn a_permit_removed_under_its_holder_is_lost_and_the_body_cancelled() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let started = Instant::now();
    let result = a
        .semaphore("api:stolen", 2)
        .ttl(Duration::from_millis(300))
        .renew(true)
        .run(async {
            let mut conn = server.conn().await;
            let members = holders(&mut conn, "api:stolen").await;
            let _: () = conn.zrem(key("api:stolen"), &members[0]).await.unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
        })
        .await;
    assert!(
        matches!(
            result,
            Err(Error::Lost {
                reason: LossReason::Expired,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "cancelled at the next renewal"
    );
    assert!(holders(&mut conn, "api:stolen").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_without_polling() {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let ttl = Duration::from_secs(30);
    let first = a.semaphore("api:wake", 2).ttl(ttl).acquire().await.unwrap();
    let _second = b.semaphore("api:wake", 2).ttl(ttl).acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = c
            .semaphore("api:wake", 2)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .expect("the waiter gets a permit");
        (started.elapsed(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut conn = server.conn().await;
    let attempts = testkit::command_calls(&mut conn, "evalsha").await;
    let released = Instant::now();
    first.release().await.unwrap();
    let (waited, guard) = waiter.await.unwrap();
    let woken_after = released.elapsed();
    eprintln!("a waiter was woken {woken_after:?} after the release (lease 30 s)");
    assert!(waited >= Duration::from_millis(300), "waited {waited:?}");
    assert!(
        woken_after < Duration::from_secs(1),
        "woken by the release ({woken_after:?}), far below the 30 s lease"
    );
    // The release and one attempt: the waiter did not poll meanwhile.
    let calls = testkit::command_calls(&mut conn, "evalsha").await - attempts;
    assert!(calls <= 3, "{calls} script calls");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn re_entry_takes_no_second_permit() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = a.clone();
    a.semaphore("api:re", 1)
        .run(async {
            let mut conn = server.conn().await;
            let inner = b.semaphore("api:re", 1).acquire().await.unwrap();
            assert!(inner.is_reentry());
            assert_eq!(holders(&mut conn, "api:re").await.len(), 1);
            // Another count, or the lock of the same name, is not a re-entry of this hold.
            let err = b.semaphore("api:re", 2).acquire().await.unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::PermitsMismatch {
                        asked: 2,
                        held: 1,
                        ..
                    }
                ),
                "{err}"
            );
            let err = b.lock("api:re").acquire().await.unwrap_err();
            assert!(matches!(err, Error::Incompatible { .. }), "{err}");
            inner.release().await.unwrap();
            assert_eq!(holders(&mut conn, "api:re").await.len(), 1);
        })
        .await
        .unwrap();
    // `run` sends its release without waiting: another connection sees it once it is answered.
    a.settle().await;
    let mut conn = server.conn().await;
    assert!(holders(&mut conn, "api:re").await.is_empty());
}

#[tokio::test]
async fn fenced_permits_hand_out_strictly_increasing_tokens() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut tokens = Vec::new();
    let mut guards = Vec::new();
    for round in 0..6 {
        let c = if round % 2 == 0 { &a } else { &b };
        let guard = c
            .semaphore("api:fence", 3)
            .fenced(true)
            .acquire()
            .await
            .unwrap();
        tokens.push(guard.token().expect("a fenced permit has a token"));
        guards.push(guard);
        if guards.len() == 3 {
            guards.remove(0).release().await.unwrap();
        }
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_at_most_n_bodies_at_once_and_waiters_wake() {
    let cluster = RedisCluster::start(3, 0);
    let clients = cluster.clients(3).await;
    for name in ["api:c1", "api:c2", "api:c3"] {
        assert_eq!(
            permit_race(&clients, (3, 5), (name, 2), Duration::from_millis(5)).await,
            2,
            "{name}"
        );
    }
    // A waiter is woken by a release through sharded pub/sub.
    let held = clients[0]
        .semaphore("api:cw", 1)
        .ttl(Duration::from_secs(30))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    let waiter = clients[1].clone();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .semaphore("api:cw", 1)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (woken, guard) = waiting.await.unwrap();
    assert!(
        woken - released < Duration::from_secs(1),
        "{:?}",
        woken - released
    );
    guard.release().await.unwrap();
}

#[derive(Debug)]
enum AppError {
    Lock(Error),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error)
    }
}

const REPORT_PERMITS: u32 = 2;

/// The attribute: at most 2 bodies at once per tenant, on the `permits` client.
#[distlock::distributed_lock(
    key = "api:<tenant>",
    permits = 2,
    ttl = "5s",
    renew,
    wait = "10s",
    client = "permits"
)]
async fn call_partner(tenant: String) -> Result<(), AppError> {
    let now = INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    let _ = tenant;
    Ok(())
}

static INSIDE: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

/// A constant count with `skip`: every permit held skips the body.
#[distlock::distributed_lock(key = "report", permits = REPORT_PERMITS, skip, client = "permits")]
async fn report() -> Result<bool, AppError> {
    Ok(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_limits_bodies_to_its_permits() {
    let server = RedisServer::start();
    let c = Config::new(server.url())
        .install_as("permits")
        .await
        .unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| tokio::spawn(call_partner("acme".to_owned())))
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(MOST.load(Ordering::SeqCst), 2);
    let held = [
        c.semaphore("report", 2).acquire().await.unwrap(),
        c.semaphore("report", 2).acquire().await.unwrap(),
    ];
    assert!(
        !report().await.unwrap(),
        "skipped while both permits are held"
    );
    drop(held);
    eventually(
        Duration::from_secs(5),
        "the permits are released",
        || async { report().await.unwrap().then_some(()) },
    )
    .await;
    // Another count through the attribute is the typed error.
    let four = c.semaphore("api:acme", 4).acquire().await.unwrap();
    let err = call_partner("acme".to_owned()).await.unwrap_err();
    assert!(
        matches!(
            err,
            AppError::Lock(Error::PermitsMismatch {
                asked: 2,
                held: 4,
                ..
            })
        ),
        "{err:?}"
    );
    four.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_permits_survive_a_failover_and_wake_waiters_there() {
    let group = Arc::new(RedisSentinel::start());
    let old_master = group.master_port();
    let connect = || {
        Config::sentinel(group.sentinel_urls(), RedisSentinel::SERVICE)
            .response_timeout(Duration::from_secs(3))
            .replica_timeout(Duration::from_millis(500))
            .connect()
    };
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    // Renewed, acknowledged by the replica; the ttl outlasts the old master's conversion.
    let ttl = Duration::from_secs(24);
    let held: Vec<_> = [&a, &b]
        .iter()
        .map(|c| {
            c.semaphore("api:s", 2)
                .ttl(ttl)
                .renew(true)
                .min_replicas(1)
                .acquire()
        })
        .collect();
    let mut guards = Vec::new();
    for take in held {
        guards.push(take.await.expect("a permit, acknowledged by the replica"));
    }
    let err = a.semaphore("api:s", 2).acquire().await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    let started = Instant::now();
    let new_master = {
        let group = group.clone();
        tokio::task::spawn_blocking(move || group.failover())
            .await
            .unwrap()
    };
    assert_ne!(new_master, old_master);
    for guard in &guards {
        eventually(
            ttl / 2,
            "a renewal acknowledged on the new master",
            || async { (guard.guaranteed_until() > started + ttl).then_some(()) },
        )
        .await;
        guard
            .ensure_held()
            .expect("the permit survived the failover");
    }
    let mut conn = group.server(new_master).conn().await;
    assert_eq!(holders(&mut conn, "api:s").await.len(), 2);
    let err = a.semaphore("api:s", 2).acquire().await.unwrap_err();
    assert!(err.is_busy(), "still both permits held: {err}");
    // A waiter on the new master is woken by a release there.
    let waiter = a.clone();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .semaphore("api:s", 2)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guards
        .remove(0)
        .release()
        .await
        .expect("released on the new master");
    let (woken, third) = waiting.await.unwrap();
    assert!(
        woken - released < Duration::from_secs(1),
        "{:?}",
        woken - released
    );
    third.release().await.unwrap();
    guards.remove(0).release().await.unwrap();
}

// --- Holders in other processes -------------------------------------------------------------

/// The holder process: when `PERMIT_CHILD` is set (`name,permits,ttl ms,url`), takes one
/// permit with renewal, prints `held`, and runs a body that never ends; if its lease is lost it
/// prints `lost: <reason>`. Without the variable (a normal test run) it does nothing.
#[tokio::test]
async fn child_holder() {
    let Ok(spec) = std::env::var("PERMIT_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (name, permits, ttl, url) = (parts[0], parts[1], parts[2], parts[3]);
    let client = Config::new(url).connect().await.unwrap();
    let result = client
        .semaphore(name, permits.parse().unwrap())
        .ttl(Duration::from_millis(ttl.parse().unwrap()))
        .renew(true)
        .run(async {
            println!("held");
            std::future::pending::<()>().await
        })
        .await;
    match result {
        Err(Error::Lost { reason, .. }) => println!("lost: {reason}"),
        other => println!("ended: {other:?}"),
    }
}

/// A holder process of one permit (see [`child_holder`]): it has said `held`.
async fn holder(server: &RedisServer, name: &str, permits: u32, ttl: Duration) -> ChildTest {
    let spec = format!("{name},{permits},{},{}", ttl.as_millis(), server.url());
    let mut child = ChildTest::spawn("child_holder", ("PERMIT_CHILD", spec));
    child.expect("held", Duration::from_secs(20)).await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permit_is_free_within_its_ttl() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1500);
    let first = holder(&server, "api:kill", 2, ttl).await;
    let _second = holder(&server, "api:kill", 2, ttl).await;
    let c = client(&server).await;
    let err = c.semaphore("api:kill", 2).acquire().await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    let killed = Instant::now();
    first.signal("KILL");
    let guard = c
        .semaphore("api:kill", 2)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the killed holder's permit comes free");
    let freed = killed.elapsed();
    eprintln!("a SIGKILLed holder's permit (ttl {ttl:?}) was taken {freed:?} after the kill");
    assert!(
        freed <= ttl + Duration::from_millis(300),
        "free after {freed:?}"
    );
    // The other holder still holds its permit (renewed): no global reset of the count.
    let mut conn = server.conn().await;
    assert_eq!(holders(&mut conn, "api:kill").await.len(), 2);
    let err = client(&server)
        .await
        .semaphore("api:kill", 2)
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_is_told_lost_and_its_permit_goes_to_another() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1000);
    let mut holder = holder(&server, "api:stall", 1, ttl).await;
    holder.signal("STOP");
    let c = client(&server).await;
    let guard = c
        .semaphore("api:stall", 1)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the stalled holder's permit expires");
    holder.signal("CONT");
    let line = holder.expect("lost", Duration::from_secs(5)).await;
    assert!(line.contains("lease") || line.contains("expired"), "{line}");
    // The new holder is untouched by the stalled one coming back.
    guard.ensure_held().unwrap();
    let mut conn = server.conn().await;
    assert_eq!(holders(&mut conn, "api:stall").await.len(), 1);
    guard.release().await.unwrap();
}

/// Holders in several processes: while `PERMIT_RACE` is set, the child counts itself in and
/// out of a Redis counter while holding a permit, recording any count above the permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_racer() {
    let Ok(spec) = std::env::var("PERMIT_RACE") else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (name, permits, rounds, url) = (parts[0], parts[1], parts[2], parts[3]);
    let permits: u32 = permits.parse().unwrap();
    let client = Config::new(url).connect().await.unwrap();
    let store = redis::Client::open(url).unwrap();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (client, store, name) = (client.clone(), store.clone(), name.to_owned());
        let rounds: usize = rounds.parse().unwrap();
        tasks.push(tokio::spawn(async move {
            let mut conn = store.get_multiplexed_async_connection().await.unwrap();
            for _ in 0..rounds {
                let guard = client
                    .semaphore(name.as_str(), permits)
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let inside: u32 = conn.incr("inside", 1).await.unwrap();
                let _: () = conn.zadd("seen", inside, inside).await.unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
                let _: i64 = conn.decr("inside", 1).await.unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    println!("done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_bodies_at_once_across_processes() {
    let server = RedisServer::start();
    let spec = format!("api:procs,3,15,{}", server.url());
    let mut children: Vec<ChildTest> = (0..4)
        .map(|_| ChildTest::spawn("child_racer", ("PERMIT_RACE", spec.clone())))
        .collect();
    for child in &mut children {
        child.expect("done", Duration::from_secs(120)).await;
    }
    let mut conn = server.conn().await;
    // Every count of bodies inside that any body saw as it came in.
    let seen: Vec<u32> = conn.zrange("seen", 0, -1).await.unwrap();
    assert_eq!(
        seen.iter().max(),
        Some(&3),
        "seen {seen:?}: at most 3, and 3 reached"
    );
    let inside: i64 = conn.get("inside").await.unwrap();
    assert_eq!(inside, 0);
    assert!(holders(&mut conn, "api:procs").await.is_empty());
}
