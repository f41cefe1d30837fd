use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distributed_lock(key = "move:<from>-<to>")]
async fn transfer((from, to): (u64, u64)) -> Result<(), AppError> {
    let _ = (from, to);
    Ok(())
}

fn main() {
    let _ = transfer((1, 2));
}
