use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// A set of locks is exclusive: neither a semaphore's permits nor a shared hold.
#[distributed_lock(key = ["a:<x>", "b:<x>"], permits = 3)]
async fn limited(x: u64) -> Result<(), AppError> { Ok(()) }

#[distributed_lock(key = ["a:<x>", "b:<x>"], read)]
async fn shared(x: u64) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = limited(1);
    let _ = shared(1);
}
