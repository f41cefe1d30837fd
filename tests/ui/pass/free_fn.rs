#![deny(warnings)]
//! A free function with every option spelled out, and the defaults.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{assert_send, expect_not_initialized, AppError};

#[derive(Debug)]
pub struct Receipt(pub u64);

/// Settles an order (doc comments and attributes stay on the function).
#[distributed_lock(key = "order:<id>", ttl = "10s", renew)]
#[inline(never)]
pub async fn settle(id: u64) -> Result<Receipt, AppError> {
    Ok(Receipt(id))
}

// The most ordinary shape, on one line: the parameter is read only by the key.
#[distributed_lock(key = "a:<id>", ttl = "10s")]
pub async fn one_line(id: u32) -> Result<u32, AppError> { Ok(7) }

#[distributed_lock(key = "nightly-report")]
async fn defaults() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "account:<account_id>", ttl = "500ms", wait = "2s", fenced)]
pub(crate) async fn debit(account_id: u64, mut cents: u64) -> Result<u64, AppError> {
    cents += 1;
    Ok(account_id + cents)
}

#[distributed_lock(key = "name:<name>", ttl = "1h")]
async fn borrowed(name: &str) -> Result<usize, AppError> {
    Ok(name.len())
}

fn main() {
    expect_not_initialized(assert_send(settle(42)));
    expect_not_initialized(one_line(1));
    expect_not_initialized(defaults());
    expect_not_initialized(debit(1, 2));
    let name = String::from("x");
    expect_not_initialized(borrowed(&name));
}
