use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

pub struct Report {
    pub lines: usize,
}

trait Nightly {
    async fn nightly(&self) -> Result<Report, AppError>;
}

pub struct Reports;

impl Nightly for Reports {
    #[distributed_lock(key = "nightly-report", skip)]
    async fn nightly(&self) -> Result<Report, AppError> {
        Ok(Report { lines: 0 })
    }
}

fn main() {
    let _ = Reports.nightly();
}
