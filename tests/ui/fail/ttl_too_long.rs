use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// The maximum lease is 30 days (`distlock::MAX_TTL`).
#[distributed_lock(key = "order:<id>", ttl = "721h")]
async fn settle(id: u64) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = settle(1);
}
