use std::time::Duration;

use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// Shorter than `distlock::MIN_TTL`: refused where the constant is evaluated, as a literal
// `ttl = "50ms"` is refused by the attribute.
const ORDER_TTL: Duration = Duration::from_millis(50);

#[distributed_lock(key = "order:<id>", ttl = ORDER_TTL)]
async fn settle(id: u64) -> Result<u64, AppError> { Ok(1) }

fn main() {
    let _ = settle(1);
}
