#![deny(warnings)]
//! Native `async fn` in traits: the attribute goes on the impl's method (and on default bodies).

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

pub struct Store {
    region: &'static str,
}

#[allow(async_fn_in_trait)]
pub trait Settle {
    async fn settle(&self, id: u64) -> Result<u64, AppError>;

    #[distributed_lock(key = "default:<id>")]
    async fn audit(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

impl Settle for Store {
    #[distributed_lock(key = "order:<self.region>:<id>", ttl = "10s")]
    async fn settle(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

fn main() {
    let store = Store { region: "eu" };
    expect_not_initialized(store.settle(1));
    expect_not_initialized(store.audit(2));
}
