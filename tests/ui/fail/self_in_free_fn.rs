use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "tenant:<self.tenant>:<id>")]
async fn update(id: u64) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = update(1);
}
