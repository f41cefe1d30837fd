use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// The count names a constant, not a parameter: every caller must agree on it.
#[distributed_lock(key = "api:<tenant>", permits = limit)]
async fn call(tenant: &str, limit: u32) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = call("acme", 5);
}
