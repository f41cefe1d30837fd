//! Leader election: three replicas of a scheduler, and only the leader schedules.
//!
//! Each replica campaigns for `scheduler` (`distlock::leader`); the leader claims the store
//! with its term the moment it is elected (from then on a deposed leader's write to any key of
//! the election is refused), runs three ticks, writing each run into the store through
//! `distlock::fence` with its term (at `last-run:{scheduler}`: every key written under the
//! election carries its hash tag, `{scheduler}`), then resigns, and the next replica in line
//! is elected at once. An observer prints every term as it starts. The stores' connections
//! are opened through `distlock::redis`, the redis-rs (1.x) that `FencedStore` takes. Last, it
//! runs the README's leader snippet ([`readme_leader`], kept equal to the README by the
//! suite's `tests/readme.rs`): a fallible body under `run`, which returns when the body
//! returns. Run with `cargo run -p distlock-examples --example leader` (starts its own Redis,
//! or set `REDIS_URL`).

use std::time::Duration;

/// How long a deposed leader's write can still arrive here: far longer than its lease.
const FENCES_ARRIVE_WITHIN: Duration = Duration::from_secs(60);

use distlock::fence::redis::FencedStore;
use distlock::{Config, Error, Observed};

/// The README's scheduler body: schedules the jobs due, writing with the term's fence (here it
/// only counts them), and fails as application code does, with its own error.
async fn schedule(fence: distlock::Fence) -> Result<u64, AppError> {
    if fence.token() == 0 {
        return Err(AppError::NoTerm);
    }
    Ok(3)
}

/// The README's application error: its own failures, and distlock's.
#[derive(Debug)]
enum AppError {
    NoTerm,
    Lock(Error),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error)
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::NoTerm => f.write_str("scheduled without a term"),
            AppError::Lock(error) => write!(f, "lock: {error}"),
        }
    }
}

impl std::error::Error for AppError {}

/// The README's leader snippet, as the README shows it (the lines between the markers), on
/// the default client: the jobs the body scheduled, once it returned.
async fn readme_leader() -> Result<u64, AppError> {
    // README leader snippet: begin
    // Leader election: candidates elected in turn, each term a fencing token. `run` campaigns,
    // runs the body while this process leads and returns when the body returns, with its output:
    // here `schedule`'s Result<u64, AppError> (AppError: From<distlock::Error>), hence `??`. A
    // term lost while the body runs cancels the body and campaigns again; `run` fails only with
    // what no campaign mends (no client installed). `serve` stays a candidate for good.
    let scheduled: u64 = distlock::leader("scheduler")
        .identity("10.0.0.7:8080")
        .ttl(Duration::from_secs(5))
        .run(|leadership| async move { schedule(leadership.fence()).await })
        .await??;
    // Followers: a Stream of Result<Observed, Error>, each term as it starts.
    let leaders = distlock::leader("scheduler").observe();
    // README leader snippet: end
    drop(leaders);
    Ok(scheduled)
}

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
            distlock::redis::Client::open(url.clone())?
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
                                .set("last-run:{scheduler}", &run, &leadership.fence())
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
        distlock::redis::Client::open(url.clone())?
            .get_multiplexed_async_connection()
            .await?,
        FENCES_ARRIVE_WITHIN,
    );
    let last = store
        .get::<String>("last-run:{scheduler}")
        .await?
        .expect("written");
    println!("last run: {} (term {})", last.value, last.token);
    // The first leader, deposed long ago, tries to write a key no later leader wrote: refused.
    let stale = distlock::Fence::new("scheduler", terms[0]);
    let refused = store.set("next-run:{scheduler}", "stale", &stale).await;
    assert!(matches!(refused, Err(Error::Fenced { .. })));
    println!("a deposed leader's write: refused");

    // The README's snippet, on the default client: `run` returns once the body has.
    distlock::init(url).await?;
    let scheduled = readme_leader().await?;
    println!("the README's leader scheduled {scheduled} jobs, and `run` returned");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The README's snippet runs as shown: elected, the fallible body runs and returns, and so
    /// does `run`, with the body's output.
    #[test]
    fn the_readme_snippet_returns_when_its_body_returns() {
        let server = testkit::RedisServer::start();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let scheduled = runtime.block_on(async {
            distlock::init(server.url()).await.unwrap();
            tokio::time::timeout(std::time::Duration::from_secs(10), super::readme_leader())
                .await
                .expect("run returns within 10 s")
        });
        assert_eq!(scheduled.unwrap(), 3);
    }
}
