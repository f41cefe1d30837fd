use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// Braces as in `format!`: the runtime refuses braces in lock names, so this would fail on
// every call; it is refused here instead.
#[distributed_lock(key = "hash:{id}")]
async fn settle(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
