use distlock::distributed_lock;

#[derive(Debug)]
enum AppError {
    NotFound,
}

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Result<u64, AppError> {
    if id == 0 {
        return Err(AppError::NotFound);
    }
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
