#![deny(warnings)]
//! `?`, early `return`, and a body that only ends in `?` keep their meaning inside the lock.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

#[distributed_lock(key = "parse:<input>")]
async fn parse(input: &str) -> Result<u32, AppError> {
    if input.is_empty() {
        return Err(AppError::Invalid("empty"));
    }
    let value: u32 = input
        .parse()
        .map_err(|_| AppError::Invalid("not a number"))?;
    if value == 0 {
        return Ok(0);
    }
    std::fs::metadata("/")?;
    Ok(value)
}

#[distributed_lock(key = "fail:<code>")]
async fn always_fails(code: i32) -> Result<std::convert::Infallible, AppError> {
    Err(std::io::Error::from_raw_os_error(code))?
}

mod app {
    /// An application's own `Result` alias: the macro accepts any path ending in `Result`.
    pub type Result<T, E = crate::AppError> = std::result::Result<T, E>;
}

#[distributed_lock(key = "io:<path>")]
async fn aliased(path: &str) -> app::Result<()> {
    std::fs::metadata(path)?;
    Ok(())
}

#[distributed_lock(key = "nested:<n>")]
async fn nested(n: u32) -> Result<u32, AppError> {
    let double = async move { n * 2 }.await;
    let closure = |x: u32| -> Result<u32, AppError> { Ok(x + 1) };
    closure(double)
}

fn main() {
    expect_not_initialized(parse("12"));
    expect_not_initialized(always_fails(2));
    expect_not_initialized(nested(1));
    expect_not_initialized(aliased("/"));
}
