use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

/// A count of replicas.
#[distributed_lock(key = "ledger:<account>", min_replicas = 1)]
async fn settle(account: u64) -> Result<u64, AppError> {
    Ok(account)
}

/// Every replica a failover could promote (Redis Sentinel: `distlock::ALL_REPLICAS`).
#[distributed_lock(key = "ledger:<account>", ttl = "6s", renew, min_replicas = all)]
async fn settle_everywhere(account: u64) -> Result<u64, AppError> {
    Ok(account)
}

fn main() {
    let _ = settle(1);
    let _ = settle_everywhere(1);
}
