use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

pub struct Order {
    pub id: u64,
    pub cents: u64,
}

#[distributed_lock(key = "order:<order.idx>")]
async fn settle(order: Order) -> Result<u64, AppError> { Ok(order.cents) }

fn main() {
    let _ = settle(Order { id: 1, cents: 2 });
}
