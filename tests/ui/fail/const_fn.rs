use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distributed_lock(key = "order:<id>")]
const fn settle(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    let _ = settle(1);
}
