use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "order:<id>")]
const fn settle(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
