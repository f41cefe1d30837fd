use distlock::distributed_lock;

#[derive(Debug)]
struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

struct Report {
    lines: usize,
}

#[distributed_lock(key = "nightly-report", skip)]
async fn nightly() -> Result<Report, AppError> {
    Ok(Report { lines: 0 })
}

fn main() {
    let _ = nightly();
    let _ = |report: Report| report.lines;
}
