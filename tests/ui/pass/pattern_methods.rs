#![deny(warnings)]
//! Methods with pattern parameters next to the receiver: `&self`, `&mut self`, and a native
//! `async fn` in a trait; `<self.field>` and pattern-bound names in one key.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{AppError, Json, Path, assert_send, expect_not_initialized};

pub struct Order {
    pub id: u64,
    pub cents: u64,
}

pub struct Service {
    tenant: String,
    settled: u64,
}

impl Service {
    #[distributed_lock(key = "settle:<self.tenant>:<id>", ttl = "10s", renew)]
    pub async fn settle(&self, Path(id): Path<u64>) -> Result<(), AppError> { Ok(()) }

    #[distributed_lock(key = "pay:<self.tenant>:<order_id>", wait = "1s")]
    pub async fn pay(&mut self, Json(Order { id: order_id, cents }): Json<Order>) -> Result<u64, AppError> {
        self.settled += cents;
        Ok(self.settled)
    }
}

#[allow(async_fn_in_trait)]
pub trait Refund {
    async fn refund(&self, order: Path<u64>) -> Result<u64, AppError>;
}

impl Refund for Service {
    #[distributed_lock(key = "refund:<self.tenant>:<id>")]
    async fn refund(&self, Path(id): Path<u64>) -> Result<u64, AppError> { Ok(id) }
}

fn main() {
    let mut service = Service { tenant: "acme".to_owned(), settled: 0 };
    expect_not_initialized(assert_send(service.settle(Path(1))));
    expect_not_initialized(service.pay(Json(Order { id: 2, cents: 100 })));
    assert_eq!(service.settled, 0, "the body must not run without the lock");
    expect_not_initialized(service.refund(Path(3)));
}
