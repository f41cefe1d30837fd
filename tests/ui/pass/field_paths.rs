#![deny(warnings)]
//! Field paths: nested fields, tuple fields, raw identifiers, references and smart pointers.

#[path = "../support.rs"]
mod support;

use std::sync::Arc;

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

pub struct User {
    pub id: u64,
    pub r#type: &'static str,
}

pub struct Request {
    pub user: User,
    pub pair: (u8, (u16, char)),
}

pub struct Service {
    config: Arc<Config>,
}

pub struct Config {
    pub tenant: String,
}

impl Service {
    #[distributed_lock(
        key = "t:<self.config.tenant>:u:<req.user.id>:<req.user.r#type>:<req.pair.1.0>/<req.pair.1.1>"
    )]
    async fn handle(&self, req: &Request) -> Result<(), AppError> {
        Ok(())
    }
}

#[distributed_lock(key = "boxed:<req.user.id>")]
async fn boxed(req: Box<Request>) -> Result<u8, AppError> {
    Ok(req.pair.0)
}

fn main() {
    let service = Service {
        config: Arc::new(Config {
            tenant: "acme".to_owned(),
        }),
    };
    let request = Request {
        user: User {
            id: 1,
            r#type: "admin",
        },
        pair: (1, (2, 'x')),
    };
    expect_not_initialized(service.handle(&request));
    expect_not_initialized(boxed(Box::new(request)));
}
