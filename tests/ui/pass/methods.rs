#![deny(warnings)]
//! Methods: `&self`, `&mut self`, `self`, `self: Box<Self>`, with receiver fields in the key.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{assert_send, expect_not_initialized, AppError};

pub struct Request {
    pub user_id: u64,
}

#[derive(Debug)]
pub struct Service {
    tenant: String,
    updates: u32,
}

impl Service {
    #[distributed_lock(key = "user:<self.tenant>:<req.user_id>", ttl = "500ms", wait = "2s")]
    pub async fn update(&self, req: &Request) -> Result<(), AppError> { Ok(()) }

    #[distributed_lock(key = "user:<self.tenant>:counter")]
    pub async fn bump(&mut self) -> Result<u32, AppError> {
        self.updates += 1;
        Ok(self.updates)
    }

    #[distributed_lock(key = "user:<self.tenant>:close")]
    pub async fn close(self) -> Result<String, AppError> {
        Ok(self.tenant)
    }

    #[distributed_lock(key = "user:<self.tenant>:boxed")]
    pub async fn boxed(self: Box<Self>) -> Result<u32, AppError> {
        Ok(self.updates)
    }

    #[distributed_lock(key = "user:<self.tenant>:new")]
    pub async fn fork(&self) -> Result<Self, AppError> {
        Ok(Service {
            tenant: self.tenant.clone(),
            updates: 0,
        })
    }
}

fn main() {
    let mut service = Service {
        tenant: "acme".to_owned(),
        updates: 0,
    };
    expect_not_initialized(assert_send(service.update(&Request { user_id: 7 })));
    expect_not_initialized(service.bump());
    expect_not_initialized(service.fork());
    assert_eq!(service.updates, 0, "the body must not run without the lock");
    expect_not_initialized(
        Box::new(Service {
            tenant: "b".to_owned(),
            updates: 0,
        })
        .boxed(),
    );
    expect_not_initialized(service.close());
}
