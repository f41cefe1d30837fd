use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// The minimum lease is 100ms (`distlock::MIN_TTL`): shorter is refused at compile time.
#[distributed_lock(key = "order:<id>", ttl = "99ms")]
async fn settle(id: u64) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = settle(1);
}
