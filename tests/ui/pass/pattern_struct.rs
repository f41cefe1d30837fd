#![deny(warnings)]
//! Struct patterns: fields by their own name (`Order { id, .. }`), renamed
//! (`Order { id: order_id, .. }`), inside a tuple struct (`Json(Order { .. })`), and a whole
//! value bound by a pattern read through a field path (`Json(order)`, `<order.customer>`).

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{AppError, Json, expect_not_initialized};

pub struct Customer {
    pub name: String,
}

pub struct Order {
    pub id: u64,
    pub customer: Customer,
    pub lines: Vec<u32>,
}

fn order(id: u64) -> Order {
    Order {
        id,
        customer: Customer { name: "ada".to_owned() },
        lines: vec![1, 2],
    }
}

#[distributed_lock(key = "order:<id>", ttl = "10s")]
async fn shorthand(Json(Order { id, .. }): Json<Order>) -> Result<(), AppError> { Ok(()) }

#[distributed_lock(key = "order:<order_id>:<customer.name>")]
async fn renamed(Order { id: order_id, customer, lines }: Order) -> Result<usize, AppError> {
    Ok(lines.len())
}

#[distributed_lock(key = "customer:<order.customer.name>", wait = "1s")]
async fn field_path(Json(order): Json<Order>) -> Result<u64, AppError> {
    Ok(order.id)
}

fn main() {
    expect_not_initialized(shorthand(Json(order(1))));
    expect_not_initialized(renamed(order(2)));
    expect_not_initialized(field_path(Json(order(3))));
}
