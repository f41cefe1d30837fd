//! RedLock (`Config::redlock`) with masters that are down or frozen, over five `redis-server`s
//! from the testkit: acquires and releases settle as soon as a majority decided, without
//! waiting out the response timeout of the masters that do not answer, and what those masters
//! are sent still reaches them (the straggling requests finish in the background, in order per
//! lock value), so they end up holding nothing once they answer again, even after the runtime
//! of the caller that sent them is gone.
//!
//! Every paused server is thawed by a drop guard (`RedisServer::paused`), so a failing test
//! leaves no stopped `redis-server` behind.

use std::time::{Duration, Instant};

use distlock::{Client, Config, Error};
use testkit::RedisServer;

const MASTERS: usize = 5;

/// Long enough that a master which does not answer would show in every timing below.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

fn masters() -> Vec<RedisServer> {
    (0..MASTERS).map(|_| RedisServer::start()).collect()
}

async fn client(masters: &[RedisServer], response_timeout: Duration) -> Client {
    Config::redlock(masters.iter().map(RedisServer::url))
        .response_timeout(response_timeout)
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect("a RedLock client")
}

/// The lock keys on `master` (any owner).
async fn lock_keys(master: &RedisServer) -> Vec<String> {
    testkit::lock_keys(&mut master.conn().await).await
}

/// Waits until none of `servers` holds a lock key, failing after `within`.
async fn no_lock_keys_within(servers: &[&RedisServer], within: Duration, what: &str) {
    testkit::eventually(within, what, || async {
        for server in servers {
            if !lock_keys(server).await.is_empty() {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test]
async fn acquire_and_release_settle_early_with_two_masters_killed() {
    let mut masters = masters();
    let (a, b) = (
        client(&masters, RESPONSE_TIMEOUT).await,
        client(&masters, RESPONSE_TIMEOUT).await,
    );
    masters[1].kill();
    masters[4].kill();
    let mut slowest = Duration::ZERO;
    for round in 0..6 {
        let started = Instant::now();
        let guard = a
            .lock("killed")
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .expect("a majority of 3 is up");
        // Busy is decided by the three live masters too.
        let busy = b.lock("killed").acquire().await;
        assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
        guard.release().await.expect("released by the majority");
        let took = started.elapsed();
        println!("round {round}: acquire + busy + release took {took:?}");
        slowest = slowest.max(took);
    }
    assert!(
        slowest < Duration::from_secs(1),
        "a cycle took {slowest:?}: the dead masters' response timeout ({RESPONSE_TIMEOUT:?}) was waited out"
    );
    let live = [&masters[0], &masters[2], &masters[3]];
    no_lock_keys_within(
        &live,
        Duration::from_secs(2),
        "released on every live master",
    )
    .await;
    testkit::at_rest(&[&a, &b], RESPONSE_TIMEOUT * 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_paused_masters_keep_locks_exclusive_and_get_every_release_once_thawed() {
    let masters = masters();
    // The shared resource: a counter on a server of its own, read and written non-atomically.
    let store = RedisServer::start();
    // Short: two acquires that split the three live masters between them wait out the paused
    // masters (no majority is decided), then try again.
    let response_timeout = Duration::from_millis(500);
    let clients = [
        client(&masters, response_timeout).await,
        client(&masters, response_timeout).await,
    ];
    let paused = [masters[0].paused(), masters[3].paused()];

    // One cycle alone settles with the three live masters.
    let started = Instant::now();
    let guard = clients[0]
        .lock("paused-alone")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("a majority of 3 answers");
    guard.release().await.expect("released by the majority");
    let alone = started.elapsed();
    println!("one cycle with two masters paused: {alone:?}");
    assert!(
        alone < response_timeout / 2,
        "a cycle took {alone:?}: the paused masters' response timeout was waited out"
    );

    let (tasks, rounds) = (2, 6);
    // A long ttl: a key the paused masters still hold once thawed could only go away by a
    // release, not by expiring during the test.
    let lock = ("paused-counter", Duration::from_secs(30));
    assert_eq!(
        testkit::counter_race(&clients, tasks, rounds, lock, &store).await,
        (clients.len() * tasks * rounds) as i64,
        "a lost update: two holders at once"
    );
    let live = [&masters[1], &masters[2], &masters[4]];
    no_lock_keys_within(
        &live,
        Duration::from_secs(2),
        "released on every live master",
    )
    .await;

    // Thawed, the paused masters run what they were sent, in order: every grant they hand out
    // late is followed by its release.
    let thawed_at = Instant::now();
    for guard in paused {
        guard.resume();
    }
    let frozen = [&masters[0], &masters[3]];
    no_lock_keys_within(
        &frozen,
        response_timeout * 3,
        "the thawed masters hold no lock (their releases reached them)",
    )
    .await;
    println!("thawed masters clean after {:?}", thawed_at.elapsed());
    let refs: Vec<&Client> = clients.iter().collect();
    testkit::at_rest(&refs, response_timeout * 3).await;
    // Nothing was left to expire: the keys went with releases, well within their 30 s ttl, and
    // the lock is free on all five.
    let again = clients[1]
        .lock("paused-counter")
        .acquire()
        .await
        .expect("free again");
    again.release().await.unwrap();
    let all: Vec<&RedisServer> = masters.iter().collect();
    no_lock_keys_within(&all, Duration::from_secs(2), "nothing held anywhere").await;
}

#[tokio::test]
async fn a_paused_majority_fails_the_acquire_within_about_the_response_timeout() {
    let masters = masters();
    let response_timeout = Duration::from_millis(500);
    let client = client(&masters, response_timeout).await;
    let ttl = Duration::from_secs(2);
    let paused = [
        masters[0].paused(),
        masters[2].paused(),
        masters[4].paused(),
    ];
    let started = Instant::now();
    let found = client.lock("paused-majority").ttl(ttl).acquire().await;
    let took = started.elapsed();
    println!("acquire with three masters paused failed after {took:?}");
    testkit::expect_no_quorum(found, 3);
    assert!(
        took < response_timeout + Duration::from_millis(500),
        "took {took:?} at a response timeout of {response_timeout:?}"
    );
    // The two live masters' grants are released by the failed attempt's cleanup.
    let live = [&masters[1], &masters[3]];
    no_lock_keys_within(
        &live,
        Duration::from_secs(2),
        "released on the live masters",
    )
    .await;
    // Thawed, the paused masters may grant the attempt late, but not beyond its ttl (the
    // cleanup's release follows the acquire on each of them).
    let thawed_at = Instant::now();
    for guard in paused {
        guard.resume();
    }
    let frozen = [&masters[0], &masters[2], &masters[4]];
    no_lock_keys_within(
        &frozen,
        ttl + Duration::from_millis(500),
        "nothing held on the thawed masters beyond the ttl",
    )
    .await;
    println!("thawed masters clean after {:?}", thawed_at.elapsed());
    let guard = client
        .lock("paused-majority")
        .acquire()
        .await
        .expect("the lock works again");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn fenced_tokens_strictly_increase_with_two_masters_paused() {
    let masters = masters();
    let response_timeout = Duration::from_secs(1);
    let (a, b) = (
        client(&masters, response_timeout).await,
        client(&masters, response_timeout).await,
    );
    let paused = [masters[1].paused(), masters[2].paused()];
    let mut last = 0;
    let started = Instant::now();
    for round in 0..10 {
        let client = if round % 2 == 0 { &a } else { &b };
        let guard = client
            .lock("paused-fenced")
            .fenced(true)
            .acquire()
            .await
            .unwrap();
        let token = guard.token().expect("a fenced lock has a token");
        assert!(token > last, "token {token} after {last}");
        last = token;
        guard.release().await.unwrap();
    }
    let took = started.elapsed();
    println!("10 fenced cycles with two masters paused: {took:?}");
    assert!(
        took < response_timeout * 2,
        "10 fenced cycles took {took:?}: the paused masters were waited out"
    );
    drop(paused);
    let all: Vec<&RedisServer> = masters.iter().collect();
    no_lock_keys_within(&all, response_timeout * 3, "nothing held once thawed").await;
}

#[tokio::test]
async fn a_cancelled_acquire_leaves_nothing_once_the_paused_masters_thaw() {
    let masters = masters();
    let response_timeout = Duration::from_millis(500);
    let client = client(&masters, response_timeout).await;
    // A majority frozen: the acquire cannot be decided, and is given up (dropped) meanwhile.
    let paused = [
        masters[1].paused(),
        masters[2].paused(),
        masters[3].paused(),
    ];
    let given_up = tokio::time::timeout(
        Duration::from_millis(50),
        client
            .lock("cancelled")
            .ttl(Duration::from_secs(30))
            .acquire(),
    )
    .await;
    assert!(given_up.is_err(), "undecided within 50 ms: {given_up:?}");
    // The cancelled attempt's cleanup releases it on the live masters.
    let live = [&masters[0], &masters[4]];
    no_lock_keys_within(
        &live,
        Duration::from_secs(2),
        "released on the live masters",
    )
    .await;
    // Thawed, the frozen masters grant the attempt late, then run the release that was sent
    // after it: nothing is left (the 30 s ttl is far off).
    for guard in paused {
        guard.resume();
    }
    let frozen = [&masters[1], &masters[2], &masters[3]];
    no_lock_keys_within(
        &frozen,
        response_timeout * 3,
        "the thawed masters hold nothing of the cancelled attempt",
    )
    .await;
    testkit::at_rest(&[&client], response_timeout * 3).await;
}

/// Panics seen on the clients' runtime threads (`distlock-client`), counted by a panic hook.
static CLIENT_THREAD_PANICS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

#[test]
fn stragglers_outlive_the_runtime_of_their_caller() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some("distlock-client") {
            CLIENT_THREAD_PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        default_hook(info);
    }));
    let masters = masters();
    let response_timeout = Duration::from_millis(300);
    let paused = [masters[0].paused(), masters[3].paused()];
    // The caller's runtime takes a lock and lets go of it, then ends while the requests to the
    // frozen masters are still out.
    let caller = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = caller.block_on(async {
        let client = client(&masters, response_timeout).await;
        let guard = client
            .lock("outlived")
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .expect("a majority of 3 answers");
        guard.release().await.expect("released by the majority");
        client
    });
    assert!(client.background_tasks() > 0, "stragglers are out");
    drop(caller);
    let checker = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    checker.block_on(async {
        // Past their deadline (and the one more timeout a timed-out request is kept).
        testkit::at_rest(&[&client], response_timeout * 4).await;
        for guard in paused {
            guard.resume();
        }
        let live = [&masters[1], &masters[2], &masters[4]];
        no_lock_keys_within(
            &live,
            Duration::from_secs(2),
            "released on the live masters",
        )
        .await;
    });
    assert_eq!(
        CLIENT_THREAD_PANICS.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a straggler polled a timer of the caller's runtime after it was gone"
    );
}

/// The watchdog renews a client's locks in batches. One lock of a batch whose majority cannot
/// be heard (here: 2 of 5 masters down, and a third lost the key, as after a restart without
/// persistence) must not keep the others from being renewed: before, the whole batch failed
/// as `NoQuorum` and every lock in it was reported lost when its lease ran out.
#[tokio::test]
async fn one_undecided_lock_does_not_fail_its_renewal_batch() {
    let mut masters = masters();
    let client = client(&masters, Duration::from_millis(300)).await;
    let ttl = Duration::from_millis(600);
    let renewed = |name: &'static str| client.lock(name).ttl(ttl).renew(true).acquire();
    let (split, whole) = (
        renewed("split").await.unwrap(),
        renewed("whole").await.unwrap(),
    );
    masters[3].kill();
    masters[4].kill();
    let () = redis::cmd("DEL")
        .arg("distlock:{split}")
        .query_async(&mut masters[2].conn().await)
        .await
        .unwrap();
    // `split` is renewed by 2 of the 3 live masters (gone on the third): no majority can be
    // confirmed, so it is lost within its lease. `whole` is renewed by all 3 and stays held.
    let reason = tokio::time::timeout(ttl * 3, split.lost())
        .await
        .expect("the undecided lock is reported lost within its lease");
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(
        whole.lost_reason(),
        None,
        "a lock its majority renewed was lost with its batch (the other lock: {reason})"
    );
    whole.release().await.expect("still held");
}

/// Four clients contend for one lock with 2 of 5 masters killed. An attempt that the 3 live
/// masters split between two waiters used to stay undecided until the killed masters' requests
/// failed (their reconnect attempts, or the whole response timeout), and so did the release
/// after it: seconds per split. Masters known to be down now count as refusing for acquires
/// (a late grant is still released in order) and end a release that cannot reach a majority
/// without them, so the live masters decide at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_with_two_masters_killed_is_not_held_up_by_them() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_test_writer()
        .try_init();
    let mut masters = masters();
    let store = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&masters, Duration::from_secs(5)).await);
    }
    masters[3].kill();
    masters[4].kill();
    let started = Instant::now();
    let lock = ("contended", Duration::from_secs(5));
    let n = testkit::counter_race(&clients, 1, 10, lock, &store).await;
    let took = started.elapsed();
    assert_eq!(n, 40, "a lost update: two holders at once");
    // Held up by the killed masters, each split cost seconds (40 sections: well over 10 s);
    // decided by the live ones, the whole race takes 1-3 s (4.25 s once on 2 loaded cores).
    assert!(
        took < Duration::from_secs(8),
        "40 contended sections with 2 of 5 masters killed took {took:?}"
    );
}

/// With 3 of 5 masters killed nobody can hold the lock: acquires fail with `NoQuorum` (not
/// `Busy`), also once the client knows those masters are down and decides without waiting
/// for them.
#[tokio::test]
async fn a_majority_known_to_be_down_fails_acquires_with_no_quorum() {
    let mut masters = masters();
    let client = client(&masters, RESPONSE_TIMEOUT).await;
    for master in &mut masters[..3] {
        master.kill();
    }
    for round in 0..4 {
        let started = Instant::now();
        let refused = client.lock("gone").acquire().await.unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(refused, Error::NoQuorum { required: 3, .. }),
            "round {round}: {refused}"
        );
        assert!(took < RESPONSE_TIMEOUT, "round {round} took {took:?}");
    }
}
