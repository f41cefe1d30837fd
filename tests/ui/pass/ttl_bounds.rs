//! The shortest and longest literal leases the attribute accepts (`distlock::MIN_TTL`,
//! `distlock::MAX_TTL`).
#![deny(warnings)]

use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "short:<id>", ttl = "100ms")]
async fn shortest(id: u64) -> Result<(), AppError> { Ok(()) }

#[distributed_lock(key = "long:<id>", ttl = "720h", min_hold = "30d")]
async fn longest(id: u64) -> Result<(), AppError> { Ok(()) }

fn main() {
    assert_eq!(distlock::MIN_TTL, std::time::Duration::from_millis(100));
    assert_eq!(distlock::MAX_TTL, std::time::Duration::from_secs(720 * 3600));
    let _ = shortest(1);
    let _ = longest(1);
}
