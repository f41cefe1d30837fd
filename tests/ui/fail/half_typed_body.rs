use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// A body that does not parse yet still expands: the only error is the body's own.
#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Result<u64, AppError> {
    let total = id +;
    Ok(total)
}

fn main() {
    let _ = settle(1);
}
