#![deny(warnings)]
//! Pattern parameters with `#[async_trait]`, which renames them `__argN` and destructures them
//! inside its boxed block: the key destructures a borrow of each one before it moves there.
//! Names only the key reads, `mut` and `ref` bindings, a `_` parameter, a reference pattern.

#[path = "../support.rs"]
mod support;

use async_trait::async_trait;
use distlock::distributed_lock;
use support::{AppError, Json, Path, assert_send, expect_not_initialized};

pub struct Order {
    pub id: u64,
    pub customer: String,
    pub lines: Vec<u32>,
}

#[async_trait]
pub trait Orders {
    async fn settle(&self, id: Path<u64>, order: Json<Order>) -> Result<usize, AppError>;
    async fn count(&mut self, pair: (u32, u32), by: Path<u32>) -> Result<u32, AppError>;
    async fn skip(&self, unused: u8, pair: &(u8, u8)) -> Result<(), AppError>;
}

pub struct Store {
    region: &'static str,
    count: u32,
}

#[async_trait]
impl Orders for Store {
    #[distributed_lock(key = "order:<self.region>:<id>:<customer>", ttl = "10s", renew)]
    async fn settle(&self, Path(id): Path<u64>, Json(Order { customer, ref lines, .. }): Json<Order>) -> Result<usize, AppError> {
        Ok(lines.len())
    }

    #[distributed_lock(key = "count:<a>:<by>", wait = "1s")]
    async fn count(&mut self, (a, mut b): (u32, u32), Path(mut by): Path<u32>) -> Result<u32, AppError> {
        b += 1;
        by += b;
        self.count += by;
        Ok(self.count)
    }

    #[distributed_lock(key = "skip:<x>", skip)]
    async fn skip(&self, _: u8, &(x, _): &(u8, u8)) -> Result<(), AppError> { Ok(()) }
}

fn main() {
    let mut store = Store { region: "eu", count: 0 };
    let order = Order { id: 1, customer: "ada".to_owned(), lines: vec![] };
    expect_not_initialized(assert_send(store.settle(Path(order.id), Json(order))));
    expect_not_initialized(store.count((1, 2), Path(3)));
    assert_eq!(store.count, 0, "the body must not run without the lock");
    expect_not_initialized(store.skip(0, &(1, 2)));
}
