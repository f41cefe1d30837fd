use std::time::Duration;

use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// A duration option names a constant, not a parameter.
#[distributed_lock(key = "order:<id>", ttl = timeout)]
async fn settle(id: u64, timeout: Duration) -> Result<u64, AppError> { Ok(1) }

fn main() {
    let _ = settle(1, Duration::ZERO);
}
