//! A scheduled job on several replicas: each replica fires every tick, exactly one runs it.
//!
//! `skip` turns "lock is busy" into `Ok(Default::default())`, so the replicas that lose the
//! race simply return; `min_hold` keeps the lock for 10 s even though the job is done sooner,
//! so a replica whose scheduler fires a little late skips too. Run with `cargo run -p distlock-examples --example scheduled_job` (starts its own Redis, or
//! set `REDIS_URL`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::distributed_lock;

#[derive(Debug)]
struct JobError(#[allow(dead_code)] distlock::Error);

impl From<distlock::Error> for JobError {
    fn from(e: distlock::Error) -> Self {
        JobError(e)
    }
}

/// Returns `Some(replica)` when this replica ran the job, `None` when another one had it.
#[distributed_lock(key = "report:<day>", ttl = "30s", renew, skip, min_hold = "10s")]
async fn nightly_report(day: u32, replica: usize) -> Result<Option<usize>, JobError> {
    tokio::time::sleep(Duration::from_millis(200)).await; // the work
    Ok(Some(replica))
}

#[tokio::main]
async fn main() -> Result<(), JobError> {
    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());
    distlock::init(url).await?;

    let runs = Arc::new(AtomicUsize::new(0));
    for day in 1..=3 {
        let replicas: Vec<_> = (0..5)
            .map(|replica| tokio::spawn(nightly_report(day, replica)))
            .collect();
        for r in replicas {
            if let Some(replica) = r.await.expect("replica task")? {
                println!("day {day}: replica {replica} ran the report; the other 4 skipped");
                runs.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3, "exactly one run per day");
    Ok(())
}
