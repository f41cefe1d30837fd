use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Option<u64> {
    Some(id)
}

fn main() {
    let _ = settle(1);
    let _ = AppError;
}
