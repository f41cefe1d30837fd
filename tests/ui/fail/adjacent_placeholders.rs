use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

#[distributed_lock(key = "cell:<row><col>")]
async fn paint(row: u32, col: u32) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = paint(1, 2);
}
