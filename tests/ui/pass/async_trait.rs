#![deny(warnings)]
//! `#[async_trait]` on the impl, `#[distributed_lock]` on the method: async-trait expands first
//! and the attribute locks the boxed future.

#[path = "../support.rs"]
mod support;

use async_trait::async_trait;
use distlock::distributed_lock;
use support::{assert_send, expect_not_initialized, AppError};

pub struct Request {
    pub user_id: u64,
}

#[async_trait]
pub trait Orders {
    async fn settle(&self, id: u64, req: &Request) -> Result<u64, AppError>;
    async fn bump(&mut self, by: u32) -> Result<u32, AppError>;
    async fn pair(&self, pair: (u8, u8), ab: (u8, u8)) -> Result<u8, AppError>;
    async fn nightly(&self) -> Result<(), AppError>;
    async fn archive(&self, day: u32, shard: u8) -> Result<(), AppError>;

    #[distributed_lock(key = "default:<id>")]
    async fn audit(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

pub struct Store {
    region: String,
    count: u32,
}

#[async_trait]
impl Orders for Store {
    #[distributed_lock(key = "order:<self.region>:<id>:<req.user_id>", ttl = "10s", renew)]
    async fn settle(&self, id: u64, req: &Request) -> Result<u64, AppError> {
        Ok(id + req.user_id)
    }

    #[distributed_lock(key = "count:<self.region>", wait = "1s")]
    async fn bump(&mut self, by: u32) -> Result<u32, AppError> {
        self.count += by;
        Ok(self.count)
    }

    // Destructured parameters work in the body; the key names the bound ones.
    #[distributed_lock(key = "pair:<pair.0>-<pair.1>")]
    async fn pair(&self, pair: (u8, u8), (a, b): (u8, u8)) -> Result<u8, AppError> {
        Ok(pair.0 + a + b)
    }

    #[distributed_lock(key = "nightly", skip)]
    async fn nightly(&self) -> Result<(), AppError> {
        Ok(())
    }

    // By-value parameters that only the key reads (async-trait moves them into its block).
    #[distributed_lock(key = "archive:<day>:<shard>", ttl = "1m30s")]
    async fn archive(&self, day: u32, shard: u8) -> Result<(), AppError> { Ok(()) }
}

// `?Send` traits box a non-`Send` future.
#[async_trait(?Send)]
pub trait Local {
    async fn local(&self, id: u64) -> Result<u64, AppError>;
}

#[async_trait(?Send)]
impl Local for Store {
    #[distributed_lock(key = "local:<id>")]
    async fn local(&self, id: u64) -> Result<u64, AppError> {
        let not_send = std::rc::Rc::new(id);
        Ok(*not_send)
    }
}

fn main() {
    let mut store = Store {
        region: "eu".to_owned(),
        count: 0,
    };
    expect_not_initialized(assert_send(store.settle(1, &Request { user_id: 2 })));
    expect_not_initialized(store.bump(3));
    assert_eq!(store.count, 0, "the body must not run without the lock");
    expect_not_initialized(store.pair((1, 2), (3, 4)));
    expect_not_initialized(store.nightly());
    expect_not_initialized(store.archive(1, 2));
    expect_not_initialized(store.audit(5));
    expect_not_initialized(store.local(6));
}
