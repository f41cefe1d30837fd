use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

// A body that does not parse yet still expands: the only error is the body's own.
#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Result<u64, AppError> {
    let total = id +;
    Ok(total)
}

fn main() {
    let _ = settle(1);
}
