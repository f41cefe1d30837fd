use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distributed_lock(key = "nightly-report", wait = "2s", skip)]
async fn nightly() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = nightly();
}
