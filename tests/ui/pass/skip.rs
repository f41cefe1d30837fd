#![deny(warnings)]
//! `skip` with success types that implement `Default`.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{assert_send, expect_not_initialized, AppError};

#[distributed_lock(key = "nightly-report", ttl = "5m", skip)]
async fn nightly() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "sweep:<shard>", skip, renew)]
async fn sweep(shard: u8) -> Result<Option<usize>, AppError> {
    Ok(Some(usize::from(shard)))
}

#[distributed_lock(key = "collect", skip)]
async fn collect() -> Result<Vec<String>, AppError> {
    Ok(vec![])
}

fn main() {
    // Not initialized is an error, not "busy": `skip` does not hide it.
    expect_not_initialized(assert_send(nightly()));
    expect_not_initialized(sweep(1));
    expect_not_initialized(collect());
}
