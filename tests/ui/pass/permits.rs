use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

const API_PERMITS: u32 = 5;

struct Api {
    tenant: String,
}

impl Api {
    const PERMITS: u32 = 3;

    /// A constant of the type, with every option that applies to a lock.
    #[distributed_lock(key = "api:<self.tenant>", permits = Self::PERMITS, ttl = "10s", renew, wait = "2s", fenced, min_hold = "1s", min_replicas = 1)]
    async fn call(&self, n: u64) -> Result<u64, AppError> {
        Ok(n + distlock::fencing_token().unwrap_or(0))
    }
}

/// A literal count.
#[distributed_lock(key = "api:<tenant>", permits = 5, ttl = "10s", renew, wait = "2s")]
async fn call(tenant: &str) -> Result<usize, AppError> {
    Ok(tenant.len())
}

/// A constant, with `skip`: a busy semaphore (every permit held) skips the body.
#[distributed_lock(key = "report:<day>", permits = API_PERMITS, skip, client = "reports")]
async fn report(day: u32) -> Result<(), AppError> {
    let _ = day;
    Ok(())
}

/// One permit: a lock held by one body at a time, as a semaphore.
#[distributed_lock(key = "job", permits = 1u32)]
async fn job() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let api = Api { tenant: "acme".to_owned() };
    let _ = api.call(1);
    let _ = call("acme");
    let _ = report(1);
    let _ = job();
}
