use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// A computed count: define a constant instead.
#[distributed_lock(key = "api:<tenant>", permits = limits::per_tenant())]
async fn call(tenant: &str) -> Result<(), AppError> { Ok(()) }

mod limits {
    pub fn per_tenant() -> u32 { 5 }
}

fn main() {
    let _ = call("acme");
}
