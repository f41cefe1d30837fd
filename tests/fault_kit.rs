//! `distlock::testing`'s fault kit as a user's tests use it, against real servers: each fault
//! tells the holder what the kit's docs say (the reason, within a round trip where the docs say
//! so), cancels the body, lets a fenced store refuse the stale holder, and leaves no server
//! behind. `tests/fault_kit_doc.rs` is the complete test file of `docs/testing.md`; the first
//! test here keeps the two the same.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::fence::redis::FencedStore;
use distlock::testing::{self, TestRedis, TestSentinel};
use distlock::{Config, Error, LockGuard, LossReason};
use testkit::ChildTest;
use tokio::sync::oneshot;
use tokio::time::{timeout, Instant};

/// Far below every renewal period here (ttl/3 of a 30 s ttl), far above a round trip.
const AT_ONCE: Duration = Duration::from_secs(1);

const LONG_TTL: Duration = Duration::from_secs(30);

/// The Markdown block after the marker line of `file` in `docs/testing.md`.
fn documented_test_file(file: &str) -> String {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/testing.md")).unwrap();
    let marker = format!("<!-- {file}, whole -->");
    let after = &page[page.find(&marker).expect("the marker in docs/testing.md") + marker.len()..];
    let block = after
        .trim_start()
        .strip_prefix("```rust\n")
        .expect("a rust block after the marker");
    block[..block.find("\n```").expect("the end of the block") + 1].to_owned()
}

#[test]
fn the_doc_page_shows_the_doc_test_files_whole() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for path in ["tests/fault_kit_doc.rs", "tests/fault_kit_cluster.rs"] {
        let file = std::fs::read_to_string(root.join(path)).unwrap();
        assert!(
            documented_test_file(path) == file,
            "docs/testing.md's test file differs from {path}: copy the file into the page"
        );
    }
}

/// A lock `name` held through `client`, renewed or not, with the body running under `run`
/// until the test ends it: the body's result (true if it ran to its end) and what `run` said.
struct Body {
    started: oneshot::Receiver<()>,
    finished: Arc<AtomicBool>,
    run: tokio::task::JoinHandle<Result<(), Error>>,
}

impl Body {
    fn start(client: &distlock::Client, name: &str, renew: bool) -> Body {
        let (started_tx, started) = oneshot::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let done = finished.clone();
        let lock = client.lock(name).ttl(LONG_TTL).renew(renew);
        let run = tokio::spawn(lock.run(async move {
            let _ = started_tx.send(());
            tokio::time::sleep(Duration::from_secs(60)).await;
            done.store(true, Ordering::SeqCst);
        }));
        Body {
            started,
            finished,
            run,
        }
    }

    /// Waits until the body runs.
    async fn running(&mut self) {
        (&mut self.started).await.expect("the body started");
    }

    /// What `run` returned, within `within`; asserts the body was cancelled.
    async fn outcome(self, within: Duration) -> Result<(), Error> {
        let outcome = timeout(within, self.run)
            .await
            .expect("run returned in time")
            .expect("run did not panic");
        assert!(
            !self.finished.load(Ordering::SeqCst),
            "the body ran to its end"
        );
        outcome
    }
}

fn lost_for(outcome: &Result<(), Error>) -> Option<LossReason> {
    match outcome {
        Err(Error::Lost { reason, .. }) => Some(*reason),
        _ => None,
    }
}

async fn told(guard: &LockGuard, within: Duration) -> LossReason {
    timeout(within, guard.lost())
        .await
        .expect("the holder is told in time")
}

#[tokio::test]
async fn an_expired_lock_cancels_a_renewed_body_well_before_its_next_renewal() {
    let redis = testing::init().await;
    let client = redis.config().connect().await.unwrap();
    let mut body = Body::start(&client, "fk:expire:renewed", true);
    body.running().await;
    let expired = Instant::now();
    redis.expire_lock("fk:expire:renewed").await;
    let outcome = body.outcome(AT_ONCE).await;
    assert_eq!(lost_for(&outcome), Some(LossReason::Expired), "{outcome:?}");
    eprintln!("told {:?} after the fault", expired.elapsed());
    assert!(
        !redis.is_locked("fk:expire:renewed").await,
        "nobody holds it"
    );
}

#[tokio::test]
async fn an_expired_lock_without_renewal_is_told_too() {
    let redis = testing::init().await;
    let client = redis.config().connect().await.unwrap();
    let mut body = Body::start(&client, "fk:expire:plain", false);
    body.running().await;
    redis.expire_lock("fk:expire:plain").await;
    let outcome = body.outcome(AT_ONCE).await;
    assert_eq!(lost_for(&outcome), Some(LossReason::Expired), "{outcome:?}");
}

#[tokio::test]
async fn without_the_server_check_a_renewed_holder_hears_at_its_next_renewal() {
    let redis = testing::init().await;
    let client = redis.config().server_check(None).connect().await.unwrap();
    let ttl = Duration::from_millis(1500);
    let lock = client.lock("fk:expire:unchecked").ttl(ttl).renew(true);
    let guard = lock.acquire().await.unwrap();
    let acquired = Instant::now();
    redis.expire_lock("fk:expire:unchecked").await;
    // Not nudged: it believes until its renewal, a third of the ttl after the acquire.
    tokio::time::sleep_until(acquired + ttl / 3 - Duration::from_millis(150)).await;
    guard.ensure_held().unwrap();
    assert_eq!(told(&guard, ttl).await, LossReason::Expired);
    assert!(acquired.elapsed() >= ttl / 3, "told at its renewal");
}

#[tokio::test]
async fn expiring_a_shared_name_takes_every_hold_of_it() {
    let redis = testing::init().await;
    let client = redis.config().connect().await.unwrap();
    let permit = || client.semaphore("fk:expire:permits", 2).ttl(LONG_TTL);
    let (a, b) = (
        permit().acquire().await.unwrap(),
        permit().acquire().await.unwrap(),
    );
    redis.expire_lock("fk:expire:permits").await;
    assert_eq!(told(&a, AT_ONCE).await, LossReason::Expired);
    assert_eq!(told(&b, AT_ONCE).await, LossReason::Expired);
    let reader = || client.lock("fk:expire:readers").read().ttl(LONG_TTL);
    let (a, b) = (
        reader().acquire().await.unwrap(),
        reader().acquire().await.unwrap(),
    );
    redis.expire_lock("fk:expire:readers").await;
    assert_eq!(told(&a, AT_ONCE).await, LossReason::Expired);
    assert_eq!(told(&b, AT_ONCE).await, LossReason::Expired);
}

#[tokio::test]
async fn the_faults_reach_clients_of_another_key_prefix() {
    let redis = testing::init().await;
    let client = redis
        .config()
        .key_prefix("fk-prefix")
        .connect()
        .await
        .unwrap();
    let guard = client.lock("job").ttl(LONG_TTL).acquire().await.unwrap();
    let locks = redis.key_prefix("fk-prefix");
    assert!(locks.is_locked("job").await);
    assert!(
        !redis.is_locked("job").await,
        "not under the default prefix"
    );
    locks.expire_lock("job").await;
    assert_eq!(told(&guard, AT_ONCE).await, LossReason::Expired);
    let again = client.lock("job").ttl(LONG_TTL).acquire().await.unwrap();
    let new_holder = locks.steal_lock("job").await;
    assert_eq!(told(&again, AT_ONCE).await, LossReason::Stolen);
    assert!(locks.is_locked("job").await);
    new_holder.release().await.unwrap();
    assert!(!locks.is_locked("job").await);
}

#[tokio::test]
async fn a_fault_on_a_lock_nobody_holds_says_so() {
    let redis = testing::init().await;
    let fault = AssertUnwindSafe(redis.expire_lock("fk:nobody"));
    let panic = futures_util::FutureExt::catch_unwind(fault)
        .await
        .unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("expire_lock(\"fk:nobody\"): nobody holds the lock"),
        "{message}"
    );
}

#[tokio::test]
async fn a_stolen_lock_is_held_by_its_new_holder_with_a_higher_token() {
    let redis = testing::init().await;
    let client = redis.config().connect().await.unwrap();
    let lock = || client.lock("fk:steal").ttl(LONG_TTL).fenced(true);
    let guard = lock().renew(true).acquire().await.unwrap();
    let new_holder = redis.steal_lock("fk:steal").await;
    assert_eq!(told(&guard, AT_ONCE).await, LossReason::Stolen);
    assert!(new_holder.token() > guard.token().unwrap());
    assert_eq!(new_holder.fence().name(), "fk:steal");
    let busy = lock().acquire().await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    new_holder.release().await.unwrap();
    lock().acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_stale_fenced_write_is_refused_even_when_its_holder_was_never_told() {
    let redis = testing::init().await;
    // No server check and no renewal: nothing tells this holder before its ttl.
    let client = redis.config().server_check(None).connect().await.unwrap();
    let lock = client.lock("fk:zombie").ttl(LONG_TTL).fenced(true);
    let guard = lock.acquire().await.unwrap();
    let stale = guard.fence().unwrap();
    let new_holder = redis.steal_lock("fk:zombie").await;
    guard.ensure_held().unwrap(); // it still believes
    let conn = distlock::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut store = FencedStore::new(conn, Duration::from_secs(60));
    store
        .set("balance:{fk:zombie}", 1, &new_holder.fence())
        .await
        .unwrap();
    let refused = store.set("balance:{fk:zombie}", 2, &stale).await;
    assert!(
        matches!(refused, Err(Error::Fenced { token, seen, .. }) if token == stale.token() && seen == new_holder.token()),
        "{refused:?}"
    );
    let kept = store.get::<i64>("balance:{fk:zombie}").await.unwrap();
    assert_eq!(kept.map(|s| s.value), Some(1));
    drop(guard);
    new_holder.release().await.unwrap();
}

#[tokio::test]
async fn a_paused_server_loses_the_renewed_lock_and_answers_again_once_thawed() {
    let redis = TestRedis::start().unwrap();
    let client = testkit::client_with(redis.url(), Duration::from_millis(200)).await;
    let ttl = Duration::from_secs(1);
    let lock = client.lock("fk:pause").ttl(ttl).renew(true);
    let guard = lock.acquire().await.unwrap();
    let paused = Instant::now();
    let frozen = redis.pause();
    assert_eq!(told(&guard, ttl * 2).await, LossReason::Unreachable);
    assert!(paused.elapsed() >= ttl / 2, "told when the lease ran out");
    // Frozen past the key's date (its last renewal came before the pause): the server's clock
    // ran on, so the key is gone when it thaws, and the renewals that waited in its socket
    // find nothing to extend.
    tokio::time::sleep_until(paused + ttl + Duration::from_millis(100)).await;
    frozen.resume();
    assert!(!redis.is_locked("fk:pause").await);
    drop(guard);
    client.settle().await;
}

#[tokio::test]
async fn pause_for_thaws_the_server_by_itself() {
    let redis = TestRedis::start().unwrap();
    let mut conn = distlock::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pause = redis.pause_for(Duration::from_millis(300));
    let ping = async {
        // Sent while the server is frozen: answered once it thaws.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent = Instant::now();
        let _: () = distlock::redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .unwrap();
        sent.elapsed()
    };
    let ((), waited) = tokio::join!(pause, ping);
    assert!(
        waited >= Duration::from_millis(200),
        "answered after {waited:?}"
    );
}

#[test]
fn a_paused_server_is_thawed_when_the_test_panics() {
    let redis = TestRedis::start().unwrap();
    let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _frozen = redis.pause();
        panic!("the test fails while the server is paused");
    }));
    assert!(panicked.is_err());
    let mut conn = distlock::redis::Client::open(redis.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    let pong: String = distlock::redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
}

/// The child: a server paused, then the process exits without dropping anything.
#[test]
fn child_leaves_its_server_paused() {
    if std::env::var("FAULT_KIT_CHILD").is_err() {
        return;
    }
    let redis = Box::leak(Box::new(TestRedis::start().unwrap()));
    std::mem::forget(redis.pause());
    println!("PAUSED-PID {}", redis.pid());
    std::process::exit(0);
}

#[tokio::test]
async fn a_server_left_paused_stops_with_its_test_process() {
    let mut child = ChildTest::spawn(
        "child_leaves_its_server_paused",
        ("FAULT_KIT_CHILD", "1".into()),
    );
    let line = child.expect("PAUSED-PID", Duration::from_secs(20)).await;
    // The harness may print the test's name on the same line first.
    let pid = line.split("PAUSED-PID ").nth(1).map(str::trim);
    let pid: u32 = pid.and_then(|p| p.parse().ok()).expect(&line);
    child.wait(Duration::from_secs(20)).await;
    let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
    testkit::eventually(Duration::from_secs(5), "the paused server to stop", || {
        let gone = !proc.exists();
        async move { gone.then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_clock_step_expires_the_locks_it_passes_and_keeps_the_others() {
    let redis = TestRedis::start().unwrap();
    let client = redis.config().connect().await.unwrap();
    let lock = |name, secs| client.lock(name).ttl(Duration::from_secs(secs));
    let short = lock("fk:step:short", 30).acquire().await.unwrap();
    let renewed = lock("fk:step:renewed", 30)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    let long = lock("fk:step:long", 300).acquire().await.unwrap();
    let long_renewed = lock("fk:step:long-renewed", 300).renew(true);
    let long_renewed = long_renewed.acquire().await.unwrap();
    let stepped = Instant::now();
    redis.step_clock(Duration::from_secs(60)).await;
    assert_eq!(told(&short, AT_ONCE).await, LossReason::Expired);
    assert_eq!(told(&renewed, AT_ONCE).await, LossReason::Expired);
    eprintln!("told {:?} after the step began", stepped.elapsed());
    assert!(!redis.is_locked("fk:step:short").await);
    // The holders of the long locks still hold them. The key of the one not renewed lost 60 s
    // of its expiry on the server; the renewed one's was extended again from the stepped clock
    // by the renewal that confirmed it.
    let conn = distlock::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let left = |name: &'static str| {
        let mut conn = conn.clone();
        async move {
            let left: i64 = distlock::redis::cmd("PTTL")
                .arg(format!("distlock:{{{name}}}"))
                .query_async(&mut conn)
                .await
                .unwrap();
            left
        }
    };
    let not_renewed = left("fk:step:long").await;
    assert!(
        (200_000..=240_000).contains(&not_renewed),
        "{not_renewed} ms left"
    );
    let renewed_left = left("fk:step:long-renewed").await;
    assert!(renewed_left > 280_000, "{renewed_left} ms left");
    long.ensure_held().unwrap();
    long_renewed.ensure_held().unwrap();
    drop((short, renewed, long, long_renewed));
    client.settle().await;
}

#[tokio::test]
async fn a_fault_wakes_the_server_check_at_once() {
    let redis = TestRedis::start().unwrap();
    // A long period: no reading of its own comes during the test, only the kit's wake.
    let client = redis
        .config()
        .server_check(Some(Duration::from_secs(60)))
        .connect()
        .await
        .unwrap();
    let guard = client.lock("fk:step:first").ttl(LONG_TTL).acquire().await;
    let guard = guard.unwrap();
    redis.step_clock(Duration::from_secs(60)).await;
    assert_eq!(told(&guard, AT_ONCE).await, LossReason::Expired);
    drop(guard);
    client.settle().await;
}

#[tokio::test]
async fn the_confirmation_a_fault_asks_for_loses_only_what_is_gone() {
    let redis = TestRedis::start().unwrap();
    let client = redis.config().connect().await.unwrap();
    let lock = |name| client.lock(name).ttl(LONG_TTL);
    let (kept, plain) = (lock("fk:kept").renew(true), lock("fk:plain"));
    let (kept, plain) = (
        kept.acquire().await.unwrap(),
        plain.acquire().await.unwrap(),
    );
    let taken = lock("fk:taken").acquire().await.unwrap();
    redis.expire_lock("fk:taken").await; // every lease of the client confirmed now
    assert_eq!(told(&taken, AT_ONCE).await, LossReason::Expired);
    kept.ensure_held().unwrap();
    plain.ensure_held().unwrap();
    assert!(redis.is_locked("fk:kept").await && redis.is_locked("fk:plain").await);
    drop((kept, plain, taken));
    client.settle().await;
}

#[tokio::test]
async fn a_server_check_that_refuses_info_sees_no_fault() {
    // Without `INFO` a check cannot tell servers apart: it is not nudged, and hears at its
    // next renewal (the kit's docs say so).
    let redis = TestRedis::start().unwrap();
    let mut conn = distlock::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = distlock::redis::cmd("ACL")
        .arg(
            &[
                "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info",
            ][..],
        )
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = format!("redis://noinfo:pw@127.0.0.1:{}/", redis.port());
    let client = Config::new(url).connect().await.unwrap();
    let ttl = Duration::from_millis(1500);
    let guard = client
        .lock("fk:noinfo")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await;
    let guard = guard.unwrap();
    let acquired = Instant::now();
    redis.expire_lock("fk:noinfo").await;
    tokio::time::sleep_until(acquired + ttl / 3 - Duration::from_millis(150)).await;
    guard.ensure_held().unwrap();
    assert_eq!(told(&guard, ttl).await, LossReason::Expired);
    drop(guard);
    client.settle().await;
}

#[tokio::test]
async fn a_sentinel_failover_that_loses_the_lock_cancels_the_body() {
    let group = TestSentinel::start().await.unwrap();
    let client = group.config().connect().await.unwrap();
    let mut body = Body::start(&client, "fk:failover", true);
    body.running().await;
    group.failover_losing("fk:failover").await;
    let outcome = body.outcome(AT_ONCE).await;
    assert_eq!(lost_for(&outcome), Some(LossReason::Expired), "{outcome:?}");
    let master = group.master().await;
    assert!(!master.is_locked("fk:failover").await);
    // The group's servers are test servers: the faults of one work on its master.
    let guard = client
        .lock("fk:failover:steal")
        .ttl(LONG_TTL)
        .acquire()
        .await;
    let guard = guard.unwrap();
    let new_holder = master.steal_lock("fk:failover:steal").await;
    assert_eq!(told(&guard, AT_ONCE).await, LossReason::Stolen);
    new_holder.release().await.unwrap();
    drop(guard);
    client.settle().await;
}
