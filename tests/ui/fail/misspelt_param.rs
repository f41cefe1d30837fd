use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "order:<idd>")]
async fn settle(id: u64, amount: u64) -> Result<u64, AppError> { Ok(amount) }

fn main() {
    let _ = settle(1, 2);
}
