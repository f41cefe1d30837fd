//! Leader election: three replicas of a scheduler, and only the leader schedules.
//!
//! Each replica campaigns for `scheduler` (`distlock::leader`); the leader claims the store
//! with its term the moment it is elected (from then on a deposed leader's write to any key of
//! the election is refused), runs three ticks, writing each run into the store through
//! `distlock::fence` with its term, then resigns, and the next replica in line is elected at once. An
//! observer prints every term as it starts. Run with
//! `cargo run -p distlock-examples --example leader` (starts its own Redis, or set
//! `REDIS_URL`).

use std::time::Duration;

/// How long a deposed leader's write can still arrive here: far longer than its lease.
const FENCES_ARRIVE_WITHIN: Duration = Duration::from_secs(60);

use distlock::fence::redis::FencedStore;
use distlock::{Config, Error, Observed};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());

    let watcher = Config::new(url.clone()).connect().await?;
    let observer = tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut leaders = Box::pin(watcher.leader("scheduler").observe());
        let mut terms = Vec::new();
        while let Some(seen) = leaders.next().await {
            match seen.expect("the observer's client is installed") {
                Observed::Leader(leader) => {
                    println!("observer: term {} led by {}", leader.term, leader.identity);
                    terms.push(leader.term);
                }
                Observed::Past(leader) => {
                    println!(
                        "observer: term {} led by {} (missed)",
                        leader.term, leader.identity
                    );
                    terms.push(leader.term);
                }
                Observed::Vacant => println!("observer: no leader"),
                other => println!("observer: {other:?}"),
            }
            if terms.len() == 3 {
                return terms;
            }
        }
        terms
    });

    let mut replicas = Vec::new();
    for replica in 0..3 {
        let client = Config::new(url.clone()).connect().await?;
        let store = FencedStore::new(
            redis::Client::open(url.clone())?
                .get_multiplexed_async_connection()
                .await?,
            FENCES_ARRIVE_WITHIN,
        );
        replicas.push(tokio::spawn(async move {
            client
                .leader("scheduler")
                .ttl(Duration::from_secs(2))
                .identity(format!("replica-{replica}"))
                .run(|leadership| {
                    let mut store = store.clone();
                    async move {
                        // Elected: older terms are refused from now on, on every key.
                        store.claim(&leadership.fence()).await?;
                        for tick in 0..3 {
                            let run = format!("replica-{replica} tick {tick}");
                            // Refused (Error::Fenced) if a later leader has written.
                            store
                                .set("scheduler:last-run", &run, &leadership.fence())
                                .await?;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        let term = leadership.term();
                        leadership.resign().await?;
                        Ok::<_, Error>((replica, term))
                    }
                })
                .await?
        }));
        // Campaign in order: replica 0 first.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut terms = Vec::new();
    for replica in replicas {
        let (who, term) = replica.await.expect("replica task")?;
        println!("replica-{who} led term {term} and resigned");
        terms.push(term);
    }
    assert!(
        terms.windows(2).all(|w| w[1] > w[0]),
        "terms rise: {terms:?}"
    );
    let seen = observer.await.expect("observer task");
    assert_eq!(seen, terms, "the observer saw every term, in order");

    let mut store = FencedStore::new(
        redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?,
        FENCES_ARRIVE_WITHIN,
    );
    let last = store
        .get::<String>("scheduler:last-run")
        .await?
        .expect("written");
    println!("last run: {} (term {})", last.value, last.token);
    // The first leader, deposed long ago, tries to write a key no later leader wrote: refused.
    let stale = distlock::Fence::new("scheduler", terms[0]);
    let refused = store.set("scheduler:next-run", "stale", &stale).await;
    assert!(matches!(refused, Err(Error::Fenced { .. })));
    println!("a deposed leader's write: refused");
    Ok(())
}
