use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// Zero permits: refused where the constant is evaluated, as a literal `permits = 0` is refused
// by the attribute.
const API_PERMITS: u32 = 0;

#[distributed_lock(key = "api:<tenant>", permits = API_PERMITS)]
async fn call(tenant: &str) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = call("acme");
}
