use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distributed_lock(key = "cell:<row><col>")]
async fn paint(row: u32, col: u32) -> Result<(), AppError> {
    let _ = (row, col);
    Ok(())
}

fn main() {
    let _ = paint(1, 2);
}
