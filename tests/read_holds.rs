//! Shared (read) holds (`distlock::lock(name).read()`, `#[distributed_lock(read)]`) against
//! real servers: readers overlapping while writers never overlap anyone, across clients and on
//! a cluster; a writer not starved by a stream of readers (and a writer that went away holding
//! readers up for its intent's second at most); each reader leased on its own (a dropped or
//! killed reader freed within its ttl), renewed, lost when removed; waiters woken by a release;
//! re-entry across kinds; fencing; the kinds a read meets.
//!
//! The process test starts this test binary again as a reader (`READ_CHILD` names the lock;
//! see [`child_reader`]), which the test `SIGKILL`s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{distributed_lock, Config, Error, HeldBy, LossReason};
use redis::AsyncCommands;
use testkit::{
    eventually, quick_client as client, read_write_race, writer_behind_readers, ChildTest,
    RedisCluster, RedisServer,
};
use tokio::time::Instant;

/// The lock's key (readers lie there as a sorted set; see the wire protocol's "Shared holds").
fn key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// The live readers recorded at the lock's key (its marker member aside).
async fn readers(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    let members: Vec<String> = conn.zrange(key(name), 0, -1).await.unwrap_or_default();
    members.into_iter().filter(|m| m != "d2:readers").collect()
}

/// Readers stay inside 15 ms, writers 3 ms.
const HOLDS: (Duration, Duration) = (Duration::from_millis(15), Duration::from_millis(3));

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_overlap_and_writers_overlap_nobody_across_clients() {
    let server = RedisServer::start();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let inside = read_write_race(&clients, (4, 2), ("doc:race", 10), HOLDS).await;
    let most = inside.most_readers.load(Ordering::SeqCst);
    eprintln!(
        "{} reads and {} writes; at most {most} readers inside at once",
        inside.reads.load(Ordering::SeqCst),
        inside.writes.load(Ordering::SeqCst)
    );
    assert!(
        !inside.overlap.load(Ordering::SeqCst),
        "a writer overlapped someone"
    );
    assert_eq!(inside.reads.load(Ordering::SeqCst), 3 * 4 * 10);
    assert_eq!(inside.writes.load(Ordering::SeqCst), 3 * 2 * 10);
    assert!(most >= 3, "readers share the lock: at most {most} at once");
    // `run` sends its release without waiting for it: settled, every release was answered.
    // A waiter that went away may still be handed the lock for its grant window (1 s), never
    // for the 5 s ttl.
    for c in &clients {
        c.settle().await;
    }
    let conn = server.conn().await;
    eventually(
        Duration::from_secs(2),
        "the last release deletes the key",
        || {
            let mut conn = conn.clone();
            async move { (!conn.exists::<_, bool>(key("doc:race")).await.unwrap()).then_some(()) }
        },
    )
    .await;
    let mut conn = conn.clone();
    assert!(
        !conn
            .exists::<_, bool>(format!("{}:writer", key("doc:race")))
            .await
            .unwrap(),
        "no writer's intent is left behind"
    );
}

#[tokio::test]
async fn readers_and_a_writer_are_busy_for_each_other_never_incompatible() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let r1 = a.lock("doc:kinds").read().acquire().await.unwrap();
    let r2 = b.lock("doc:kinds").read().acquire().await.unwrap();
    assert!(r1.is_shared() && r2.is_shared());
    let mut conn = server.conn().await;
    assert_eq!(readers(&mut conn, "doc:kinds").await.len(), 2);
    // A distlock without shared holds acquires with `SET ... NX PX GET`: on readers that is
    // `WRONGTYPE`, which it reports as incompatible (never a take).
    let old: redis::RedisResult<Option<String>> = redis::cmd("SET")
        .arg(key("doc:kinds"))
        .arg("d2:old")
        .arg("NX")
        .arg("PX")
        .arg(1000)
        .arg("GET")
        .query_async(&mut conn)
        .await;
    assert_eq!(old.unwrap_err().code(), Some("WRONGTYPE"));
    for fenced in [false, true] {
        let err = b
            .lock("doc:kinds")
            .fenced(fenced)
            .acquire()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Busy {
                    held_by: HeldBy::Readers,
                    ..
                }
            ),
            "a writer meeting readers: {err}"
        );
        assert!(err.to_string().contains("readers"), "{err}");
    }
    // A writer that does not wait marks no intent: readers still enter.
    let r3 = b.lock("doc:kinds").read().acquire().await.unwrap();
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    r3.release().await.unwrap();
    assert!(!conn.exists::<_, bool>(key("doc:kinds")).await.unwrap());

    let writer = a.lock("doc:kinds").acquire().await.unwrap();
    assert!(!writer.is_shared());
    for fenced in [false, true] {
        let err = b
            .lock("doc:kinds")
            .read()
            .fenced(fenced)
            .acquire()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Busy {
                    held_by: HeldBy::Writer,
                    ..
                }
            ),
            "a reader meeting a writer: {err}"
        );
        assert!(err.to_string().contains("a writer holds it"), "{err}");
    }
    writer.release().await.unwrap();

    // A semaphore of the same name is another kind: incompatible both ways.
    let permit = a.semaphore("doc:kinds", 2).acquire().await.unwrap();
    let err = b.lock("doc:kinds").read().acquire().await.unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    permit.release().await.unwrap();
    let reader = a.lock("doc:kinds").read().acquire().await.unwrap();
    let err = b.semaphore("doc:kinds", 2).acquire().await.unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    reader.release().await.unwrap();
    // A semaphore with `read` is refused before anything is sent.
    let err = a
        .semaphore("doc:kinds", 2)
        .read()
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    // Another program's sorted set is not misread as readers.
    let _: () = conn.zadd(key("doc:other"), "x", 1).await.unwrap();
    let err = a.lock("doc:other").read().acquire().await.unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    let err = a.lock("doc:other").acquire().await.unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let writer = client(&server).await;
    let (waits, inside) = writer_behind_readers(&clients, &writer, "doc:stream").await;
    eprintln!("a writer behind a stream of readers (80 ms each) waited {waits:?}");
    assert!(
        !inside.overlap.load(Ordering::SeqCst),
        "a writer overlapped"
    );
    for waited in waits {
        // The readers inside when it came (80 ms each), and one intent round at most.
        assert!(
            waited < Duration::from_millis(700),
            "the writer waited {waited:?}"
        );
    }
}

/// A waiting writer queues behind the readers (issue 28): one that gives up leaves the queue
/// and holds new readers up no longer; one whose process died (its entry left in the queue)
/// holds them up for its lapse (2 s without asking again) at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_went_away_holds_new_readers_up_for_its_lapse_at_most() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let reader = a
        .lock("doc:gone")
        .read()
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let err = b
        .lock("doc:gone")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Busy {
                held_by: HeldBy::Readers,
                ..
            }
        ),
        "{err}"
    );
    // It left the queue as it gave up: a new reader enters at once.
    b.settle().await;
    let next = b.lock("doc:gone").read().acquire().await.unwrap();
    next.release().await.unwrap();
    // A writer of a process that died, first in line behind the readers.
    let mut conn = server.conn().await;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("distlock:{doc:gone}:queue")
        .arg(1024 + 1000)
        .arg("d2:dead-writer")
        .cmd("HSET")
        .arg("distlock:{doc:gone}:queue:ids")
        .arg("d2:dead-writer")
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let started = Instant::now();
    let next = b
        .lock("doc:gone")
        .read()
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("the dead writer lapses");
    let held_up = started.elapsed();
    eprintln!("a writer that died held new readers up {held_up:?}");
    assert!(
        held_up >= Duration::from_millis(1500) && held_up < Duration::from_millis(3500),
        "held up {held_up:?}: the writer's 2 s lapse (and a reader's 1 s recheck)"
    );
    next.release().await.unwrap();
    reader.release().await.unwrap();
}

#[tokio::test]
async fn a_read_hold_is_leased_renewed_and_bounded() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = server.conn().await;
    // Renewed past several ttls, the read hold stays ours, and a writer is busy.
    let renewed = a
        .lock("doc:lease")
        .read()
        .ttl(Duration::from_millis(300))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    renewed.ensure_held().unwrap();
    let err = b.lock("doc:lease").acquire().await.unwrap_err();
    assert!(err.is_busy(), "{err}");

    // A reader that never releases (nor renews) is freed at its ttl and removed by the next
    // call: no sweeper, and the set keeps only live readers.
    let dropped = b
        .lock("doc:lease")
        .read()
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    std::mem::forget(dropped);
    assert_eq!(readers(&mut conn, "doc:lease").await.len(), 2);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let third = b.lock("doc:lease").read().acquire().await.unwrap();
    assert_eq!(readers(&mut conn, "doc:lease").await.len(), 2);
    third.release().await.unwrap();
    renewed.release().await.unwrap();
    assert!(!conn.exists::<_, bool>(key("doc:lease")).await.unwrap());

    // The key itself expires with its latest reader.
    let gone = a
        .lock("doc:lease")
        .read()
        .ttl(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    std::mem::forget(gone);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!conn.exists::<_, bool>(key("doc:lease")).await.unwrap());
    let writer = b.lock("doc:lease").acquire().await.unwrap();
    writer.release().await.unwrap();
}

#[tokio::test]
async fn a_reader_removed_under_its_holder_is_lost_and_the_body_cancelled() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let started = Instant::now();
    let result = a
        .lock("doc:stolen")
        .read()
        .ttl(Duration::from_millis(300))
        .renew(true)
        .run(async {
            let mut conn = server.conn().await;
            let members = readers(&mut conn, "doc:stolen").await;
            let _: () = conn.zrem(key("doc:stolen"), &members[0]).await.unwrap();
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
    assert!(started.elapsed() < Duration::from_secs(2), "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_waiting_writers_and_readers() {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let ttl = Duration::from_secs(30);
    let r1 = a.lock("doc:wake").read().ttl(ttl).acquire().await.unwrap();
    let r2 = b.lock("doc:wake").read().ttl(ttl).acquire().await.unwrap();
    let writer = tokio::spawn(async move {
        let guard = c
            .lock("doc:wake")
            .ttl(ttl)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .expect("the writer gets the lock");
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    r1.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished(), "one reader is still inside");
    let released = Instant::now();
    r2.release().await.unwrap();
    let (woken, guard) = writer.await.unwrap();
    let after = woken - released;
    eprintln!("a writer was woken {after:?} after the last reader's release (leases 30 s)");
    assert!(after < Duration::from_millis(500), "{after:?}");

    // And a waiting reader is woken by the writer's release.
    let reader = tokio::spawn(async move {
        let guard = a
            .lock("doc:wake")
            .read()
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .expect("the reader gets in");
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (woken, guard) = reader.await.unwrap();
    assert!(woken - released < Duration::from_millis(500));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn re_entry_across_reads_and_writes() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = a.clone();
    a.lock("doc:re")
        .read()
        .run(async {
            let mut conn = server.conn().await;
            let inner = b.lock("doc:re").read().acquire().await.unwrap();
            assert!(inner.is_reentry() && inner.is_shared());
            assert_eq!(
                readers(&mut conn, "doc:re").await.len(),
                1,
                "no second share"
            );
            // A write inside a read: a typed error at once, never a self-deadlock.
            let started = Instant::now();
            let err = b
                .lock("doc:re")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
                .unwrap_err();
            assert!(
                matches!(&err, Error::WriteInsideRead { key } if key == "doc:re"),
                "{err}"
            );
            assert!(started.elapsed() < Duration::from_secs(1));
            let err = b.semaphore("doc:re", 2).acquire().await.unwrap_err();
            assert!(matches!(err, Error::Incompatible { .. }), "{err}");
            inner.release().await.unwrap();
            assert_eq!(readers(&mut conn, "doc:re").await.len(), 1);
        })
        .await
        .unwrap();
    // A read inside a write re-enters the write.
    a.lock("doc:re")
        .run(async {
            let inner = b.lock("doc:re").read().acquire().await.unwrap();
            assert!(inner.is_reentry() && !inner.is_shared());
            inner.release().await.unwrap();
            let other = client(&server).await;
            let err = other.lock("doc:re").read().acquire().await.unwrap_err();
            assert!(err.is_busy(), "still held for writing: {err}");
        })
        .await
        .unwrap();
    // `run` sends its release without waiting: another connection sees it once it is answered.
    a.settle().await;
    let mut conn = server.conn().await;
    assert!(!conn.exists::<_, bool>(key("doc:re")).await.unwrap());
}

#[tokio::test]
async fn fenced_reads_and_writes_hand_out_strictly_increasing_tokens() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut tokens = Vec::new();
    for round in 0..3 {
        let r1 = a.lock("doc:fence").read().fenced(true);
        let r1 = r1.acquire().await.unwrap();
        let r2 = b.lock("doc:fence").read().fenced(true);
        let r2 = r2.acquire().await.unwrap();
        tokens.push(r1.token().expect("a fenced read has a token"));
        tokens.push(r2.token().unwrap());
        r1.release().await.unwrap();
        r2.release().await.unwrap();
        let c = if round % 2 == 0 { &a } else { &b };
        let w = c.lock("doc:fence").fenced(true).acquire().await.unwrap();
        tokens.push(w.token().unwrap());
        w.release().await.unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_readers_overlap_and_writers_overlap_nobody() {
    let cluster = RedisCluster::start(3, 0);
    let clients = cluster.clients(3).await;
    for name in ["doc:c1", "doc:c2", "doc:c3"] {
        let inside = read_write_race(&clients, (3, 1), (name, 5), HOLDS).await;
        assert!(!inside.overlap.load(Ordering::SeqCst), "{name}: overlap");
        assert!(inside.most_readers.load(Ordering::SeqCst) >= 2, "{name}");
        assert_eq!(inside.writes.load(Ordering::SeqCst), 3 * 5, "{name}");
    }
}

// --- The attribute --------------------------------------------------------------------------

#[derive(Debug)]
enum AppError {
    Lock(Error),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error)
    }
}

static DOC_READERS: AtomicUsize = AtomicUsize::new(0);
static DOC_MOST: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "doc:<id>", read, ttl = "5s", renew, wait = "10s")]
async fn read_doc(id: u32) -> Result<(), AppError> {
    let now = DOC_READERS.fetch_add(1, Ordering::SeqCst) + 1;
    DOC_MOST.fetch_max(now, Ordering::SeqCst);
    assert!(distlock::fencing_token().is_none());
    tokio::time::sleep(Duration::from_millis(100)).await;
    DOC_READERS.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "doc:<id>", wait = "10s")]
async fn write_doc(id: u32) -> Result<usize, AppError> {
    Ok(DOC_READERS.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_attribute_takes_read_holds() {
    let server = RedisServer::start();
    let _ = distlock::Config::new(server.url()).install().await;
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers.push(tokio::spawn(read_doc(7)));
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let seen = write_doc(7).await.unwrap();
    assert_eq!(seen, 0, "the writer ran with no reader inside");
    for reader in readers {
        reader.await.unwrap().unwrap();
    }
    assert!(
        DOC_MOST.load(Ordering::SeqCst) >= 2,
        "readers shared the lock"
    );
    if let Err(AppError::Lock(error)) = read_doc(8).await {
        panic!("{error}");
    }
}

// --- A reader in another process --------------------------------------------------------------

/// The reader process: when `READ_CHILD` is set (`name,ttl ms,url`), takes a read hold with
/// renewal, prints `held`, and runs a body that never ends. Without the variable (a normal
/// test run) it does nothing.
#[tokio::test]
async fn child_reader() {
    let Ok(spec) = std::env::var("READ_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (name, ttl, url) = (parts[0], parts[1], parts[2]);
    let client = Config::new(url).connect().await.unwrap();
    let result = client
        .lock(name)
        .read()
        .ttl(Duration::from_millis(ttl.parse().unwrap()))
        .renew(true)
        .run(async {
            println!("held");
            std::future::pending::<()>().await
        })
        .await;
    println!("ended: {result:?}");
}

/// A reader process (see [`child_reader`]): it has said `held`.
async fn reader_process(server: &RedisServer, name: &str, ttl: Duration) -> ChildTest {
    let spec = format!("{name},{},{}", ttl.as_millis(), server.url());
    let mut child = ChildTest::spawn("child_reader", ("READ_CHILD", spec));
    child.expect("held", Duration::from_secs(20)).await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_readers_share_is_free_within_its_ttl() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1500);
    let first = reader_process(&server, "doc:kill", ttl).await;
    let second = reader_process(&server, "doc:kill", ttl).await;
    let c = client(&server).await;
    let mut conn = server.conn().await;
    assert_eq!(readers(&mut conn, "doc:kill").await.len(), 2);
    // Another reader shares it; a writer is busy.
    let other = c.lock("doc:kill").read().acquire().await.unwrap();
    other.release().await.unwrap();
    let err = c.lock("doc:kill").acquire().await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    // One killed: its share alone goes, at its own ttl (the other reader renews its own).
    let killed = Instant::now();
    first.signal("KILL");
    let err = c
        .lock("doc:kill")
        .wait(ttl + Duration::from_millis(500))
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_busy(), "the other reader still holds: {err}");
    assert_eq!(readers(&mut conn, "doc:kill").await.len(), 1);
    assert!(killed.elapsed() >= ttl, "not before its ttl");
    let killed = Instant::now();
    second.signal("KILL");
    let guard = c
        .lock("doc:kill")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the killed reader's share comes free");
    let freed = killed.elapsed();
    eprintln!(
        "a SIGKILLed reader's share (ttl {ttl:?}) gave way to a writer {freed:?} after the kill"
    );
    assert!(
        freed <= ttl + Duration::from_millis(300),
        "free after {freed:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_is_told_lost_and_a_writer_gets_the_lock() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(1000);
    let mut reader = reader_process(&server, "doc:stall", ttl).await;
    reader.signal("STOP");
    let c = client(&server).await;
    let guard = c
        .lock("doc:stall")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the stalled reader's share expires");
    reader.signal("CONT");
    let line = reader.expect("ended", Duration::from_secs(5)).await;
    assert!(line.contains("Lost"), "the reader is told: {line}");
    // The writer is untouched by the stalled reader coming back.
    guard.ensure_held().unwrap();
    let err = c.lock("doc:stall").read().acquire().await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    guard.release().await.unwrap();
}
