use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

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
