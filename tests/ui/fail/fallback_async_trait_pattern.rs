use async_trait::async_trait;
use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

pub struct Path<T>(pub T);

#[async_trait]
pub trait Archive {
    async fn archive(&self, day: Path<u32>) -> Result<(), AppError>;
}

pub struct Store;

// The attribute has an error: the method is still emitted as written, without an
// "unused variable `day`" warning for the name that only the key reads, bound by a pattern
// that async-trait moved into its block.
#[async_trait]
impl Archive for Store {
    #[distributed_lock(key = "archive:<dya>")]
    async fn archive(&self, Path(day): Path<u32>) -> Result<(), AppError> { Ok(()) }
}

fn main() {
    let _ = Store.archive(Path(1));
}
