#![deny(warnings)]
//! Durations as people write them in config files, and durations that live with the rest of a
//! service's settings as `Duration` constants (plain, associated, generic).

#[path = "../support.rs"]
mod support;

use std::time::Duration;

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

#[distributed_lock(key = "a:<id>", ttl = "1m30s", wait = "1.5s", min_hold = "1m 30s")]
async fn written(id: u64) -> Result<u64, AppError> { Ok(id) }

#[distributed_lock(key = "b:<id>", ttl = "2 hours", wait = "250ms", renew)]
async fn long_form(id: u64) -> Result<u64, AppError> { Ok(id) }

mod settings {
    use std::time::Duration;

    pub const ORDER_TTL: Duration = Duration::from_secs(10);
    pub const ORDER_WAIT: Duration = Duration::from_millis(1500);
}

#[distributed_lock(key = "order:<id>", ttl = settings::ORDER_TTL, wait = settings::ORDER_WAIT)]
async fn settle(id: u64) -> Result<u64, AppError> { Ok(id) }

pub struct Orders;

impl Orders {
    const TTL: Duration = Duration::from_secs(5);
    const MIN_HOLD: Duration = Duration::from_secs(60);

    #[distributed_lock(key = "orders:<id>", ttl = Self::TTL, min_hold = Self::MIN_HOLD, skip)]
    async fn sweep(&self, id: u64) -> Result<(), AppError> { Ok(()) }
}

pub trait Limits {
    const TTL: Duration;
}

pub struct Fast;

impl Limits for Fast {
    const TTL: Duration = Duration::from_millis(100);
}

pub struct Scoped<L>(L);

impl<L: Limits + Sync> Scoped<L> {
    #[distributed_lock(key = "scoped:<id>", ttl = L::TTL)]
    async fn run(&self, id: u64) -> Result<u64, AppError> { Ok(id) }

    #[distributed_lock(key = "qualified:<id>", ttl = <L as Limits>::TTL)]
    async fn qualified(&self, id: u64) -> Result<u64, AppError> { Ok(id) }
}

fn main() {
    expect_not_initialized(written(1));
    expect_not_initialized(long_form(1));
    expect_not_initialized(settle(1));
    expect_not_initialized(Orders.sweep(1));
    expect_not_initialized(Scoped(Fast).run(1));
    expect_not_initialized(Scoped(Fast).qualified(1));
}
