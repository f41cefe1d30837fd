use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[derive(Debug)]
struct Request {
    user_id: u64,
}

#[distributed_lock(key = "user:<req>")]
async fn update(req: Request) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = update(Request { user_id: 1 });
}
