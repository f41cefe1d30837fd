use async_trait::async_trait;
use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[async_trait]
pub trait Archive {
    async fn archive(&self, day: u32) -> Result<(), AppError>;
}

pub struct Store;

// The attribute has an error: the method is still emitted as written, without an
// "unused variable `day`" warning for the parameter that only the key reads.
#[async_trait]
impl Archive for Store {
    #[distributed_lock(key = "archive:<day>", ttl = "1 fortnight")]
    async fn archive(&self, day: u32) -> Result<(), AppError> { Ok(()) }
}

fn main() {
    let _ = Store.archive(1);
}
