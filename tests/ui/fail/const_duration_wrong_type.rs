use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

/// Seconds, not a `Duration`.
const ORDER_TTL: u64 = 10;

#[distributed_lock(key = "order:<id>", ttl = ORDER_TTL)]
async fn settle(id: u64) -> Result<u64, AppError> { Ok(1) }

fn main() {
    let _ = settle(1);
}
