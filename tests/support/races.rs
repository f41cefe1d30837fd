//! The counter race, the test of mutual exclusion: racers read, yield and write one counter
//! under one lock, so only exclusion keeps it exact; and the wait-for-a-release check.

use std::time::Duration;

use crate::server::RedisServer;

/// One racer of a counter race, the test of mutual exclusion: `rounds` times it takes lock
/// `name` through `client` (lease `ttl`, waiting up to a minute), reads the counter `n` from
/// `store`, yields, writes `n + 1`, runs `inside` (still holding the lock) and releases, which
/// must succeed. Only exclusion keeps the counter exact: read it with [`counter`].
pub async fn race_counter(
    client: distlock::Client,
    store: redis::Client,
    name: &str,
    ttl: Duration,
    rounds: usize,
    mut inside: impl FnMut(),
) {
    let mut conn = store.get_multiplexed_async_connection().await.unwrap();
    for _ in 0..rounds {
        let guard = client
            .lock(name)
            .ttl(ttl)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("acquired within the wait");
        let n: i64 = redis::cmd("GET")
            .arg("n")
            .query_async::<Option<i64>>(&mut conn)
            .await
            .unwrap()
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        redis::cmd("SET")
            .arg("n")
            .arg(n + 1)
            .exec_async(&mut conn)
            .await
            .unwrap();
        inside();
        guard.release().await.expect("held until released");
    }
}

/// The counter of [`race_counter`] on `store` (0 if never written).
pub async fn counter(store: &RedisServer) -> i64 {
    let mut conn = store.conn().await;
    redis::cmd("GET")
        .arg("n")
        .query_async::<Option<i64>>(&mut conn)
        .await
        .expect("GET n")
        .unwrap_or(0)
}

/// A counter race over `clients`: `tasks` tasks per client each run [`race_counter`] on lock
/// `name` for `rounds` rounds; returns the counter once all are done (exact only if no two
/// holders overlapped: it must equal `clients × tasks × rounds`).
pub async fn counter_race(
    clients: &[distlock::Client],
    tasks: usize,
    rounds: usize,
    (name, ttl): (&str, Duration),
    store: &RedisServer,
) -> i64 {
    let mut handles = Vec::new();
    for client in clients {
        for _ in 0..tasks {
            let (client, store, name) = (client.clone(), store.client(), name.to_owned());
            handles.push(tokio::spawn(async move {
                race_counter(client, store, &name, ttl, rounds, || {}).await
            }));
        }
    }
    for handle in handles {
        handle.await.expect("a racer panicked");
    }
    counter(store).await
}

/// `holder` takes lock `name` with a 30 s lease while `waiter` waits for it (up to 10 s); the
/// holder releases after 300 ms. Returns how long the waiter waited: about 300 ms if the
/// release woke it, not the lease.
pub async fn wait_for_release(
    holder: &distlock::Client,
    waiter: distlock::Client,
    name: &str,
) -> Duration {
    let held = holder
        .lock(name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the holder takes the lock");
    let name = name.to_owned();
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = waiter
            .lock(name)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .expect("the waiter gets the lock");
        let waited = started.elapsed();
        guard.release().await.expect("the waiter's release");
        waited
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("the holder's release");
    waiting.await.expect("the waiter panicked")
}
