#![deny(warnings)]
//! Generic functions with bounds, where-clauses and lifetimes; `impl Trait` in the return type.

#[path = "../support.rs"]
mod support;

use std::fmt::{Debug, Display};

use distlock::distributed_lock;
use support::{expect_not_initialized, AppError};

#[distributed_lock(key = "item:<kind>:<id>")]
async fn generic<'a, K, I: Display + Send>(kind: &'a K, id: I) -> Result<&'a K, AppError>
where
    K: Display + Debug + ?Sized + Sync,
{
    Ok(kind)
}

#[distributed_lock(key = "job:<id>")]
async fn generic_error<E>(id: u32) -> Result<u32, E>
where
    E: From<distlock::Error>,
{
    Ok(id)
}

#[distributed_lock(key = "report:<id>")]
async fn opaque(id: u32) -> Result<impl Display, AppError> {
    Ok(id)
}

struct Wrapper<T>(T);

impl<T: Display + Sync> Wrapper<T> {
    #[distributed_lock(key = "wrapped:<self.0>")]
    async fn get(&self) -> Result<&T, AppError> {
        Ok(&self.0)
    }
}

fn main() {
    expect_not_initialized(generic("a", 1u8));
    expect_not_initialized(generic_error::<AppError>(3));
    support::block_on(async {
        assert!(opaque(3).await.is_err());
    });
    expect_not_initialized(Wrapper(5).get());
}
