#![deny(warnings)]
//! `impl Trait` arguments, in the key and in the body.

#[path = "../support.rs"]
mod support;

use std::fmt::Display;

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

#[distributed_lock(key = "tag:<tag>")]
async fn tagged(
    tag: impl Display + Send,
    items: impl IntoIterator<Item = u32>,
) -> Result<u32, AppError> {
    Ok(items.into_iter().sum())
}

fn main() {
    expect_not_initialized(tagged("blue", vec![1, 2]));
}
