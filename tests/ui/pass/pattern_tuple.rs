#![deny(warnings)]
//! Tuple, slice and nested patterns: every name they bind is a parameter; `_` and `..` bind
//! nothing.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{AppError, Path, expect_not_initialized};

#[distributed_lock(key = "move:<from>-<to>")]
async fn transfer((from, to): (u64, u64)) -> Result<(), AppError> { Ok(()) }

// A key list over the names of one pattern.
#[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "5s")]
async fn both((from, to, _): (u64, u64, &str)) -> Result<u64, AppError> {
    Ok(from + to)
}

#[distributed_lock(key = "grid:<x>:<y>:<tag>")]
async fn nested(((x, _), Path((y, ..))): ((u8, u8), Path<(u16, u8, u8)>), [tag, ..]: [char; 3]) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    expect_not_initialized(transfer((1, 2)));
    expect_not_initialized(both((1, 2, "memo")));
    expect_not_initialized(nested(((1, 2), Path((3, 4, 5))), ['a', 'b', 'c']));
}
