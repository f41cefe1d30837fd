use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "order:<id>", tll = "10s")]
async fn settle(id: u64) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = settle(1);
}
