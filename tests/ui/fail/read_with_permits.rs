use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// A semaphore's permits are not shared holds: one or the other.
#[distributed_lock(key = "doc:<id>", permits = 5, read)]
async fn read_doc(id: u64) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = read_doc(1);
}
