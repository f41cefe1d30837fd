use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

pub struct Report {
    pub lines: usize,
}

pub struct Reports;

impl Reports {
    #[distributed_lock(key = "nightly-report", skip)]
    pub async fn nightly(&self) -> Result<Report, AppError> {
        Ok(Report { lines: 0 })
    }
}

fn main() {
    let _ = Reports.nightly();
}
