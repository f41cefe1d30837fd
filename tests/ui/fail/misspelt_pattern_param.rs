use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

pub struct Path<T>(pub T);
pub struct State<T>(pub T);
pub struct App;

// The names bound by the patterns are the parameters: `order_id` is suggested and listed.
#[distributed_lock(key = "order:<orderid>")]
async fn settle(Path(order_id): Path<u64>, State(app): State<App>) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = settle(Path(1), State(App));
}
