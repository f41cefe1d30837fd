use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

struct Docs {
    tenant: String,
}

impl Docs {
    /// A shared hold with every option that applies to a lock.
    #[distributed_lock(key = "doc:<self.tenant>:<id>", read, ttl = "10s", renew, wait = "2s", fenced, min_hold = "1s", min_replicas = 1)]
    async fn read(&self, id: u64) -> Result<u64, AppError> {
        Ok(id + distlock::fencing_token().unwrap_or(0))
    }

    /// The exclusive hold of the same name: an ordinary lock.
    #[distributed_lock(key = "doc:<self.tenant>:<id>", wait = "2s")]
    async fn write(&self, id: u64) -> Result<(), AppError> {
        let _ = id;
        Ok(())
    }
}

/// With `skip`: a lock held for writing (or a writer waiting) skips the body.
#[distributed_lock(key = "report:<day>", read, skip, client = "reports")]
async fn report(day: u32) -> Result<(), AppError> {
    let _ = day;
    Ok(())
}

fn main() {
    let docs = Docs { tenant: "acme".to_owned() };
    let _ = docs.read(1);
    let _ = docs.write(1);
    let _ = report(1);
}
