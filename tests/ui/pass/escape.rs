#![deny(warnings)]
//! `<<` is a literal `<`; a `>` outside a placeholder is literal as it is.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

#[distributed_lock(key = "cmp:<<<a>>=<b>")]
async fn compare(a: u32, b: u32) -> Result<bool, AppError> {
    Ok(a >= b)
}

#[distributed_lock(key = "<<literal only>")]
async fn literal() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    expect_not_initialized(compare(1, 2));
    expect_not_initialized(literal());
}
