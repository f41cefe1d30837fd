#![deny(warnings)]
//! Together with `#[tracing::instrument]`, in either order, and with lint attributes inside.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

#[tracing::instrument]
#[distributed_lock(key = "outer:<id>")]
async fn instrumented_outside(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "inner:<id>")]
#[tracing::instrument(skip(id))]
async fn instrumented_inside(id: u64) -> Result<u64, AppError> {
    #![allow(clippy::let_and_return)]
    let id = id;
    Ok(id)
}

fn main() {
    expect_not_initialized(instrumented_outside(1));
    expect_not_initialized(instrumented_inside(2));
}
