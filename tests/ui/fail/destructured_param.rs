use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "move:<from>-<to>")]
async fn transfer((from, to): (u64, u64)) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = transfer((1, 2));
}
