use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "nightly-report", wait = "2s", skip)]
async fn nightly() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = nightly();
}
