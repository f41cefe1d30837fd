use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "order:<id>", ttl = 10)]
async fn settle(id: u64) -> Result<u64, AppError> { Ok(1) }

fn main() {
    let _ = settle(1);
}
