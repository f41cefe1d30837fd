use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = [], ttl = "5s")]
async fn nothing() -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = nothing();
}
