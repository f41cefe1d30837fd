#![deny(warnings)]
//! `client = "..."` names a client installed with `Config::install_as`.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{block_on, AppError};

#[distributed_lock(key = "payout:<id>", client = "payments", ttl = "2s", wait = "100ms")]
async fn payout(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    // The name reaches the runtime, which has no such client installed.
    match block_on(payout(1)) {
        Err(AppError::Lock(distlock::Error::UnknownClient { name })) => {
            assert_eq!(name, "payments");
        }
        other => panic!("expected Err(UnknownClient), got {other:?}"),
    }
}
