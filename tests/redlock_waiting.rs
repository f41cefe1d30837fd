//! Waiting for a busy lock over a RedLock quorum (`Config::redlock`, five `redis-server`s from
//! the testkit): a waiter subscribes to the lock's release channel on every master and is woken
//! by the holder's release (not by polling, not by the holder's ttl), also with two masters
//! killed; its subscriptions are gone from every live master once the waiters leave; waiting
//! tasks take turns and stay exclusive; the releases of busy attempts' minority grants wake
//! nobody (a crashed holder is waited out at its pttl); a subscription that too few masters
//! took falls back to a look every 250 ms; waiters of four clients woken together by each
//! release do not keep splitting the masters between them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{Client, Config, Error};
use testkit::{command_calls, eventually, RedisServer};

const MASTERS: usize = 5;

/// The holder's ttl: a waiter that missed the release would wait this long.
const HOLD_TTL: Duration = Duration::from_secs(10);

fn masters() -> Vec<RedisServer> {
    (0..MASTERS).map(|_| RedisServer::start()).collect()
}

async fn client(masters: &[RedisServer]) -> Client {
    Config::redlock(masters.iter().map(RedisServer::url))
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect("a RedLock client")
}

fn channel(name: &str) -> String {
    format!("distlock:{{{name}}}:released")
}

/// Subscribers of `channel` on `master` (`PUBSUB NUMSUB`).
async fn subscribers(master: &RedisServer, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut master.conn().await)
        .await
        .unwrap();
    n
}

/// Channels subscribed on `master` (`PUBSUB CHANNELS`, and `PUBSUB SHARDCHANNELS`).
async fn channels(master: &RedisServer) -> Vec<String> {
    let mut conn = master.conn().await;
    let mut all: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut conn)
        .await
        .unwrap();
    let sharded: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(&mut conn)
        .await
        .unwrap();
    all.extend(sharded);
    all
}

/// Acquire attempts that reached `master` so far: each runs the queued acquire script once
/// (`scripts::ACQUIRE_QUEUED`), which runs one `ZRANGEBYSCORE` (its purge of lapsed entries)
/// whatever it finds; a `SET` would count only the grants.
async fn attempts(master: &RedisServer) -> u64 {
    command_calls(&mut master.conn().await, "zrangebyscore").await
}

/// Waits until `waiters` subscribers of lock `name` are on every master in `live`, and the
/// waiters' attempts on `live[0]` have reached `attempts_at_least` (so the one after
/// subscribing was made, and found the lock busy: the next wake must come from a message).
async fn until_waiting(live: &[&RedisServer], name: &str, waiters: u64, attempts_at_least: u64) {
    let channel = channel(name);
    eventually(
        Duration::from_secs(5),
        "subscribed on every live master",
        || {
            let channel = channel.clone();
            async move {
                for master in live {
                    if subscribers(master, &channel).await != waiters {
                        return None;
                    }
                }
                (attempts(live[0]).await >= attempts_at_least).then_some(())
            }
        },
    )
    .await;
}

/// A holder with ttl 10 s, one waiter on another client; the waiter must take the lock
/// `within` the release, and make no attempts while it waits (no polling). Returns the latency
/// from the release call to the waiter's acquisition.
async fn woken_by_release(
    masters: &[RedisServer],
    live: &[&RedisServer],
    name: &str,
    within: Duration,
) -> Duration {
    let (holder, waiter) = (client(masters).await, client(masters).await);
    let guard = holder
        .lock(name)
        .ttl(HOLD_TTL)
        .acquire()
        .await
        .expect("a majority is up");
    let before = attempts(live[0]).await;
    let waiting = {
        let name = name.to_owned();
        tokio::spawn(async move {
            let guard = waiter
                .lock(name)
                .ttl(HOLD_TTL)
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (guard, Instant::now())
        })
    };
    // The first attempt, and the one after subscribing.
    until_waiting(live, name, 1, before + 2).await;
    // A window in which a polling waiter would try again and again (every 20 ms before): the
    // subscribed one waits (at most one look, if a subscription confirmation arrived after
    // its attempt).
    let quiet_from = attempts(live[0]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let quiet = attempts(live[0]).await - quiet_from;
    eprintln!("quiet {quiet}");
    assert!(
        quiet <= 1000,
        "{quiet} attempts while waiting: the waiter polls"
    );
    let released_at = Instant::now();
    guard.release().await.expect("released by a majority");
    let (taken, taken_at) = waiting.await.unwrap();
    let taken = taken.expect("the waiter takes the lock after the release");
    let latency = taken_at.saturating_duration_since(released_at);
    assert!(
        latency < within,
        "woken {latency:?} after the release (holder ttl {HOLD_TTL:?}): not by the release message"
    );
    taken.release().await.unwrap();
    latency
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_on_the_masters() {
    let masters = masters();
    let live: Vec<&RedisServer> = masters.iter().collect();
    let latency = woken_by_release(&masters, &live, "wake", Duration::from_secs(1)).await;
    eprintln!("woken {latency:?} after the release (5 masters)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_surviving_masters_with_two_killed() {
    let mut masters = masters();
    masters[0].kill();
    masters[3].kill();
    let live: Vec<&RedisServer> = [1, 2, 4].iter().map(|&i| &masters[i]).collect();
    // (Its attempt after the wake settles with the live majority: calls settle early.)
    let within = Duration::from_secs(1);
    let latency = woken_by_release(&masters, &live, "wake-two-down", within).await;
    eprintln!("woken {latency:?} after the release (2 of 5 masters killed)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_leave_no_subscription_on_any_live_master() {
    let mut masters = masters();
    let (holder, a, b) = (
        client(&masters).await,
        client(&masters).await,
        client(&masters).await,
    );
    let name = "leave";
    let guard = holder.lock(name).ttl(HOLD_TTL).acquire().await.unwrap();
    // A waiter that takes the lock releases it at once.
    let wait = |client: &Client, wait: Duration| {
        let client = client.clone();
        tokio::spawn(async move {
            let guard = client.lock(name).ttl(HOLD_TTL).wait(wait).acquire().await?;
            guard.release().await
        })
    };
    // On one client, a waiter that is cancelled and, queued behind it, one that gives up (its
    // wait runs out); on another, two that take the lock in turn. So the only waiter that
    // retries when the holder releases is the first taker: no attempt is on its way then (with
    // a master down, an attempt that overtakes the release on some masters, or waiters of two
    // clients that split the live masters, fail with `NoQuorum` even while waiting, and are
    // retried after a backoff pause).
    let cancelled = wait(&b, Duration::from_secs(30));
    let live: Vec<&RedisServer> = masters.iter().collect();
    until_waiting(&live, name, 1, 0).await;
    let gives_up = wait(&b, Duration::from_millis(800));
    let takes_first = wait(&a, Duration::from_secs(30));
    until_waiting(&live, name, 2, 0).await;
    let takes_second = wait(&a, Duration::from_secs(30));
    // One master dies while they wait: the others must still end up clean.
    masters[2].kill();
    let live: Vec<&RedisServer> = [0, 1, 3, 4].iter().map(|&i| &masters[i]).collect();
    match gives_up.await.unwrap() {
        Err(Error::Busy { waited, .. }) => assert!(waited >= Duration::from_millis(800)),
        other => panic!("expected Busy after the wait, got {other:?}"),
    }
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    guard.release().await.expect("released by a majority");
    for taken in [takes_first, takes_second] {
        taken
            .await
            .unwrap()
            .expect("taken after the release, and released");
    }
    eventually(
        Duration::from_secs(5),
        "no channel on any live master, none in the clients",
        || {
            let (live, a, b) = (live.clone(), a.clone(), b.clone());
            async move {
                for master in live {
                    if !channels(master).await.is_empty() {
                        return None;
                    }
                }
                (a.waiting_channels() == 0 && b.waiting_channels() == 0).then_some(())
            }
        },
    )
    .await;
    for master in &live {
        assert_eq!(channels(master).await, Vec::<String>::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_tasks_take_turns_and_stay_exclusive_over_five_masters() {
    let masters = masters();
    // The shared resource: a counter on a server of its own, read and written non-atomically.
    let store = RedisServer::start();
    let (clients, tasks, rounds) = (2, 4, 6);
    let order = Arc::new(Mutex::new(Vec::new()));
    let before = attempts(&masters[1]).await;
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in 0..clients {
        let client = client(&masters).await;
        for task in 0..tasks {
            let (client, store, order) = (client.clone(), store.client(), order.clone());
            handles.push(tokio::spawn(async move {
                let record = || order.lock().unwrap().push((c, task));
                testkit::race_counter(client, store, "turns", HOLD_TTL, rounds, record).await
            }));
        }
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let took = started.elapsed();
    let total = clients * tasks * rounds;
    let n = testkit::counter(&store).await;
    assert_eq!(n, total as i64, "a lost update: two holders at once");
    // Every wake came from a release: one missed would have waited out a holder's ttl.
    assert!(
        took < HOLD_TTL / 2,
        "{total} turns took {took:?}: a waiter waited for a ttl"
    );
    // Within a client the tasks queue: a task that releases and asks again goes behind them.
    let order = order.lock().unwrap().clone();
    for c in 0..clients {
        let mine: Vec<usize> = order
            .iter()
            .filter(|(client, _)| *client == c)
            .map(|&(_, task)| task)
            .collect();
        let longest_run = mine
            .chunk_by(|a, b| a == b)
            .map(<[usize]>::len)
            .max()
            .unwrap();
        assert!(
            longest_run <= 3,
            "a releasing task queues behind its client's waiters: {mine:?}"
        );
    }
    // One head per client retries per release, and a busy attempt's minority grants (released
    // at once) wake nobody: attempts stay a small multiple of the turns.
    let tries = attempts(&masters[1]).await - before;
    eprintln!("{total} turns in {took:?}, {tries} attempts on one master");
    assert!(
        tries < total as u64 * 6,
        "{tries} attempts for {total} turns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_of_a_bare_majority_is_waited_out_without_waking_storms() {
    let masters = masters();
    let (a, b) = (client(&masters).await, client(&masters).await);
    let name = "crashed";
    // A holder that crashed holding a bare majority (3 of 5) with 1.5 s left: it never
    // publishes. The two other masters are free: every busy attempt is granted there, and
    // releasing those grants publishes there.
    let left = Duration::from_millis(1500);
    for master in &masters[..3] {
        let () = redis::cmd("SET")
            .arg(format!("distlock:{{{name}}}"))
            .arg("d2:dead-owner")
            .arg("PX")
            .arg(left.as_millis() as u64)
            .query_async(&mut master.conn().await)
            .await
            .unwrap();
    }
    let started = Instant::now();
    let wait = |client: &Client| {
        let client = client.clone();
        tokio::spawn(async move {
            let guard = client
                .lock(name)
                .ttl(HOLD_TTL)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
                .expect("taken once the crashed holder's lease ran out");
            let taken_at = Instant::now();
            guard.release().await.unwrap();
            taken_at
        })
    };
    let (first, second) = (wait(&a), wait(&b));
    let live: Vec<&RedisServer> = masters.iter().collect();
    until_waiting(&live, name, 2, 0).await;
    // Those minority releases (two masters at most) must not wake the other client's waiter,
    // whose attempt would publish there again, and so on.
    let quiet_from = attempts(&masters[4]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let quiet = attempts(&masters[4]).await - quiet_from;
    assert!(
        quiet <= 2,
        "{quiet} attempts in 500 ms: waiters wake each other"
    );
    // The holder's lease is waited out (its pttl), then the other waiter is woken by the
    // release of the first.
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    let earliest = first.min(second) - started;
    assert!(
        earliest >= left - Duration::from_millis(100),
        "taken after {earliest:?}"
    );
    assert!(
        first.max(second) - started < left + Duration::from_secs(2),
        "the second waiter was not woken by the first's release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_on_too_few_masters_falls_back_to_coarse_looks() {
    let masters = masters();
    // Three masters refuse SUBSCRIBE (an ACL), but serve locks and publish releases: two
    // subscribed masters are too few to count on (a release needs three to wake a waiter).
    for master in &masters[..3] {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("-subscribe")
            .query_async(&mut master.conn().await)
            .await
            .unwrap();
    }
    let (holder, waiter) = (client(&masters).await, client(&masters).await);
    let name = "few";
    let guard = holder.lock(name).ttl(HOLD_TTL).acquire().await.unwrap();
    let before = attempts(&masters[4]).await;
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock(name)
            .ttl(HOLD_TTL)
            .wait(Duration::from_secs(30))
            .acquire()
            .await;
        (guard, Instant::now(), waiter)
    });
    let subscribed: Vec<&RedisServer> = masters[3..].iter().collect();
    until_waiting(&subscribed, name, 1, before + 2).await;
    for master in &masters[..3] {
        assert_eq!(subscribers(master, &channel(name)).await, 0);
    }
    // It looks again now and then (every 250 ms), neither never nor in a tight loop.
    let from = attempts(&masters[4]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let looks = attempts(&masters[4]).await - from;
    assert!((2..=8).contains(&looks), "{looks} attempts in 1 s");
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (taken, taken_at, waiter) = waiting.await.unwrap();
    taken
        .expect("taken after the release")
        .release()
        .await
        .unwrap();
    let latency = taken_at - released_at;
    assert!(
        latency < Duration::from_secs(1),
        "taken {latency:?} after the release"
    );
    eventually(Duration::from_secs(5), "no channel left", || {
        let (subscribed, waiter) = (subscribed.clone(), waiter.clone());
        async move {
            for master in subscribed {
                if !channels(master).await.is_empty() {
                    return None;
                }
            }
            (waiter.waiting_channels() == 0).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_four_clients_woken_together_do_not_keep_splitting_the_masters() {
    let masters = masters();
    let store = RedisServer::start();
    let (clients, rounds) = (4, 15);
    let before = attempts(&masters[1]).await;
    let dels_before = command_calls(&mut masters[1].conn().await, "del").await;
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (client, store) = (client(&masters).await, store.client());
        handles.push(tokio::spawn(async move {
            testkit::race_counter(client, store, "herd", HOLD_TTL, rounds, || {}).await
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let total = clients * rounds;
    let n = testkit::counter(&store).await;
    assert_eq!(n, total as i64, "a lost update: two holders at once");
    // Each release wakes the other three clients at once. The masters grant the lock to the
    // one that came first only (their queue), so the others do not split the masters with it:
    // a master sees one `DEL` per turn (the holder's release) and hardly any more (the release
    // of a minority grant after a split).
    let tries = attempts(&masters[1]).await - before;
    let dels = command_calls(&mut masters[1].conn().await, "del").await - dels_before;
    eprintln!("{total} turns, 4 clients: {tries} attempts and {dels} DEL on one master");
    // The head of the queue retries at each release, the waiters behind it let the wakes of
    // those ahead pass, and the releasing client queues again (two attempts): measured 295–304
    // attempts (about 5 a turn; 410–455 when every waiter looked at every release) and 60–61
    // DEL, every client taking its turn (`redlock_fairness.rs`). Before the queue (a random
    // pause after a lost wake; each attempt was one SET): 89–107 attempts, 61–63 DEL. A storm (a split, all release, all woken, split again) would be one DEL per
    // split on top, and attempts without bound.
    assert!(
        tries < (total * clients * 3) as u64,
        "{tries} attempts for {total} turns"
    );
    assert!(
        dels < total as u64 + total as u64 / 4,
        "{dels} DEL for {total} turns: attempts split the masters"
    );
}

/// `LEAVE_QUEUE` in its RedLock form (two keys per lock: the queue and its lapses; no lock, no
/// channel, since a RedLock release hands nothing over) over several locks at once takes the
/// waiter out of every queue: the script must not read the next lock's queue as a lock.
#[tokio::test]
async fn leaving_the_queues_of_several_locks_over_redlock_takes_the_waiter_out_of_each() {
    let master = RedisServer::start();
    let mut conn = master.conn().await;
    let keys = ["q:{a}", "u:{a}", "q:{b}", "u:{b}"];
    for (queue, until) in [(keys[0], keys[1]), (keys[2], keys[3])] {
        let _: () = redis::pipe()
            .zadd(queue, "d2:waiter", 1)
            .ignore()
            .zadd(until, "d2:waiter", 99_999_999_999_u64)
            .ignore()
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let (id, removed): (String, u64) = redis::Script::new(distlock::scripts::LEAVE_QUEUE)
        .key(&keys[..])
        .arg("d2:waiter")
        .arg("r1")
        .arg("-")
        .arg(2)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!((id.as_str(), removed), ("r1", 2));
    for key in keys {
        let left: u64 = redis::cmd("ZCARD")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(left, 0, "{key}");
    }
}
