use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// A list of one lock is one lock: `key = "..."`.
#[distributed_lock(key = ["account:<id>"], ttl = "5s")]
async fn audit(id: u64) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = audit(1);
}
