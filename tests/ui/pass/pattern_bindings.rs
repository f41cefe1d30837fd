#![deny(warnings)]
//! Binding modes in patterns: `ref`, `mut`, `ref mut`, `name @ pattern`, and `mut name: T`;
//! the key reads each name before the body, which may then borrow, change or move it.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{AppError, Json, Path, expect_not_initialized};

#[distributed_lock(key = "name:<name>:<count>")]
async fn modes(Json(ref name): Json<String>, Path(mut count): Path<u32>) -> Result<usize, AppError> {
    count += 1;
    Ok(name.len() + count as usize)
}

#[distributed_lock(key = "tag:<tag>")]
async fn ref_mut(Json(ref mut tag): Json<String>) -> Result<(), AppError> {
    tag.push('!');
    Ok(())
}

#[distributed_lock(key = "plain:<id>")]
async fn mut_param(mut id: u64) -> Result<u64, AppError> {
    id += 1;
    Ok(id)
}

#[distributed_lock(key = "at:<whole.0>:<first>")]
async fn at(whole @ (first, _): (u8, u8)) -> Result<u8, AppError> { Ok(whole.1) }

// A name the key reads and the body moves.
#[distributed_lock(key = "owned:<text>")]
async fn moved(Json(text): Json<String>) -> Result<String, AppError> { Ok(text) }

fn main() {
    expect_not_initialized(modes(Json("a".to_owned()), Path(1)));
    expect_not_initialized(ref_mut(Json("t".to_owned())));
    expect_not_initialized(mut_param(1));
    expect_not_initialized(at((1, 2)));
    expect_not_initialized(moved(Json("b".to_owned())));
}
