use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// `T` has no `Default` bound.
#[distributed_lock(key = "job:<id>", skip)]
async fn job<T: From<u64>>(id: u64) -> Result<T, AppError> { Ok(T::from(id)) }

fn main() {
    let _ = job::<u64>(1);
}
