//! RedLock (`Config::redlock`) over five independent `redis-server`s started by the testkit:
//! exclusion by majority (the counter race is exact), locks keep working with two masters
//! killed, three killed make the acquire fail quickly with `Error::NoQuorum`, renewal and
//! release count by majority, and nothing of a failed attempt stays behind.

use std::time::{Duration, Instant};

use distlock::{Client, Config, Error};
use redis::AsyncCommands;
use testkit::RedisServer;

const MASTERS: usize = 5;

/// How long a call's requests to the other masters may go on in the background once a
/// majority decided it.
const SETTLED: Duration = Duration::from_secs(2);

fn masters() -> Vec<RedisServer> {
    (0..MASTERS).map(|_| RedisServer::start()).collect()
}

fn config(masters: &[RedisServer]) -> Config {
    Config::redlock(masters.iter().map(RedisServer::url))
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
}

async fn client(masters: &[RedisServer]) -> Client {
    config(masters).connect().await.expect("a RedLock client")
}

/// The masters that hold lock `name` (for anyone).
async fn holding(masters: &[RedisServer], name: &str) -> usize {
    let mut n = 0;
    for master in masters {
        let value: Option<String> = master
            .conn()
            .await
            .get(format!("distlock:{{{name}}}"))
            .await
            .unwrap();
        n += usize::from(value.is_some());
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_counter_race_is_exact_over_five_masters() {
    let masters = masters();
    // The shared resource: a counter on a server of its own, read and written non-atomically.
    let store = RedisServer::start();
    let (clients, tasks, rounds) = (3, 4, 8);
    let mut all = Vec::new();
    for _ in 0..clients {
        all.push(client(&masters).await);
    }
    let lock = ("counter", Duration::from_secs(5));
    assert_eq!(
        testkit::counter_race(&all, tasks, rounds, lock, &store).await,
        (clients * tasks * rounds) as i64,
        "a lost update: two holders at once"
    );
    testkit::at_rest(&all.iter().collect::<Vec<_>>(), SETTLED).await;
    assert_eq!(holding(&masters, "counter").await, 0);
}

#[tokio::test]
async fn locks_work_with_two_masters_killed() {
    let mut masters = masters();
    let (a, b) = (client(&masters).await, client(&masters).await);
    masters[0].kill();
    masters[3].kill();
    let guard = a
        .lock("two-down")
        .acquire()
        .await
        .expect("a majority of 3 is up");
    let busy = b.lock("two-down").acquire().await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    guard.release().await.expect("released by the majority");
    let again = b.lock("two-down").acquire().await.expect("free again");
    again.release().await.unwrap();
}

#[tokio::test]
async fn three_masters_killed_fail_the_acquire_quickly_naming_the_quorum() {
    let mut masters = masters();
    let client = client(&masters).await;
    for i in [1, 2, 4] {
        masters[i].kill();
    }
    let started = Instant::now();
    let found = client.lock("three-down").acquire().await;
    let took = started.elapsed();
    testkit::expect_no_quorum(found, 3);
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // What the two live masters granted is released again.
    let live = [&masters[0], &masters[3]];
    testkit::eventually(
        Duration::from_secs(2),
        "released on the live masters",
        || async {
            let mut n = 0;
            for master in live {
                let v: Option<String> = master
                    .conn()
                    .await
                    .get("distlock:{three-down}")
                    .await
                    .unwrap();
                n += usize::from(v.is_some());
            }
            (n == 0).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_busy_attempt_leaves_nothing_on_the_minority_that_granted_it() {
    let masters = masters();
    // Another owner holds it on three masters (a majority); two are free.
    for master in &masters[..3] {
        let () = master
            .conn()
            .await
            .set("distlock:{minority}", "d2:someone-else:0")
            .await
            .unwrap();
    }
    let client = client(&masters).await;
    let found = client.lock("minority").acquire().await;
    assert!(matches!(found, Err(Error::Busy { .. })), "{found:?}");
    testkit::at_rest(&[&client], SETTLED).await;
    for master in &masters[3..] {
        let v: Option<String> = master
            .conn()
            .await
            .get("distlock:{minority}")
            .await
            .unwrap();
        assert_eq!(v, None, "a granted minority must be released again");
    }
}

#[tokio::test]
async fn a_renewed_lock_stays_held_across_several_ttls_and_release_frees_every_master() {
    let mut masters = masters();
    let (a, b) = (client(&masters).await, client(&masters).await);
    let ttl = Duration::from_millis(400);
    let guard = a
        .lock("renewed")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ttl * 2).await;
    // Renewal goes on by majority with two masters gone.
    masters[1].kill();
    masters[2].kill();
    tokio::time::sleep(ttl * 3).await;
    guard.ensure_held().expect("renewed by a majority");
    let busy = b.lock("renewed").acquire().await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    guard.release().await.expect("released by the majority");
    let mut left = 0;
    for i in [0, 3, 4] {
        let v: Option<String> = masters[i]
            .conn()
            .await
            .get("distlock:{renewed}")
            .await
            .unwrap();
        left += usize::from(v.is_some());
    }
    assert_eq!(left, 0, "released on every live master");
}

#[tokio::test]
async fn a_renewed_lock_is_lost_once_a_majority_is_gone() {
    let mut masters = masters();
    let client = client(&masters).await;
    let ttl = Duration::from_millis(400);
    let guard = client
        .lock("majority-gone")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    for i in [0, 1, 2] {
        masters[i].kill();
    }
    let started = Instant::now();
    let lost = tokio::time::timeout(ttl * 3, guard.lost()).await;
    assert!(lost.is_ok(), "the loss is reported within the lease");
    assert!(started.elapsed() <= ttl + Duration::from_millis(100));
    assert!(guard.ensure_held().is_err());
}

#[tokio::test]
async fn tokens_strictly_increase_across_holders() {
    let masters = masters();
    let (a, b) = (client(&masters).await, client(&masters).await);
    let mut last = 0;
    for round in 0..20 {
        let client = if round % 2 == 0 { &a } else { &b };
        let guard = client.lock("fenced").fenced(true).acquire().await.unwrap();
        let token = guard.token().expect("a fenced lock has a token");
        assert!(token > last, "token {token} after {last}");
        last = token;
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_token_exceeds_an_earlier_one_from_a_master_whose_clock_ran_ahead() {
    let mut masters = masters();
    let client = client(&masters).await;
    // Master 0's floor is far ahead of the others' clocks (a clock that ran ahead).
    let ahead: u64 = 4_000_000_000_000_000;
    let () = masters[0]
        .conn()
        .await
        .set("distlock:{skewed}:fence", ahead)
        .await
        .unwrap();
    // The first majority must include master 0 (an acquire settles with the first majority
    // that answers): masters 3 and 4 are frozen meanwhile.
    let frozen = [masters[3].paused(), masters[4].paused()];
    let first = client.lock("skewed").fenced(true).acquire().await.unwrap();
    let t1 = first.token().unwrap();
    assert!(t1 > ahead);
    first.release().await.unwrap();
    drop(frozen);
    // Thawed, masters 3 and 4 grant the first acquire late, then run the release queued
    // behind it (sent once the grant's reply is in): wait for those stragglers.
    testkit::at_rest(&[&client], SETTLED).await;
    // The next majority does not include master 0: its token must still be larger.
    masters[0].kill();
    let second = client.lock("skewed").fenced(true).acquire().await.unwrap();
    let t2 = second.token().unwrap();
    assert!(t2 > t1, "token {t2} after {t1}");
    second.release().await.unwrap();
}

#[tokio::test]
async fn the_attribute_reentry_and_fencing_token_work_unchanged_over_a_quorum() {
    let masters = masters();
    config(&masters).install_as("redlock-attr").await.unwrap();

    #[distlock::distributed_lock(key = "job:<id>", client = "redlock-attr", fenced)]
    async fn job(id: u32) -> Result<(u64, bool), Error> {
        let outer = distlock::fencing_token().expect("a fenced body has a token");
        // Re-entry: the same lock, same client, inside the body (a check over the quorum).
        let inner = distlock::lock(format!("job:{id}"))
            .client("redlock-attr")
            .acquire()
            .await?;
        let reentered = inner.is_reentry() && inner.token() == Some(outer);
        inner.release().await?;
        Ok((outer, reentered))
    }

    let (first, reentered) = job(7).await.unwrap();
    assert!(reentered, "the inner acquire re-entered the outer hold");
    let (second, _) = job(7).await.unwrap();
    assert!(second > first, "token {second} after {first}");
    testkit::eventually(Duration::from_secs(2), "released everywhere", || async {
        (holding(&masters, "job:7").await == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn connect_fails_when_a_majority_wants_a_password_nobody_gave() {
    use testkit::ServerOptions;
    let guarded = || {
        RedisServer::start_with(ServerOptions {
            password: Some("quorum-secret".into()),
            ..ServerOptions::default()
        })
    };
    // Three of five want a password the URLs do not carry.
    let servers: Vec<RedisServer> = (0..MASTERS)
        .map(|i| {
            if i < 3 {
                guarded()
            } else {
                RedisServer::start()
            }
        })
        .collect();
    let urls = servers
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}/", s.port()));
    let err = Config::redlock(urls).connect().await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
    // Two of five (a minority): the client starts, and locks work on the other three.
    let urls = servers.iter().enumerate().map(|(i, s)| match i {
        0 => s.url(),
        _ if i < 3 => format!("redis://127.0.0.1:{}/", s.port()),
        _ => s.url(),
    });
    let client = Config::redlock(urls).connect().await.unwrap();
    let guard = client.lock("minority-refuses").acquire().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn settings_that_do_not_apply_to_a_quorum_are_refused() {
    let masters = masters();
    let twice = [masters[0].url(), masters[1].url(), masters[0].url()];
    let err = Config::redlock(twice).connect().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    let err = config(&masters)
        .min_replicas(1)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    let client = client(&masters).await;
    let found = client.lock("replicated").min_replicas(1).acquire().await;
    assert!(
        matches!(found, Err(Error::InvalidConfig { .. })),
        "{found:?}"
    );
    assert_eq!(holding(&masters, "replicated").await, 0);
}
