use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distributed_lock(ttl = "10s")]
async fn settle(id: u64) -> Result<(), AppError> {
    let _ = id;
    Ok(())
}

fn main() {
    let _ = settle(1);
}
