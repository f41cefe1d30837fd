use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// No permit: no body could ever run.
#[distributed_lock(key = "api:<tenant>", permits = 0)]
async fn call(tenant: &str) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = call("acme");
}
