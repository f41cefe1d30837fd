use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// The same template twice names the same lock twice.
#[distributed_lock(key = ["account:<from>", "account:<to>", "account:<from>"], ttl = "5s")]
async fn transfer(from: u64, to: u64) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = transfer(1, 2);
}
