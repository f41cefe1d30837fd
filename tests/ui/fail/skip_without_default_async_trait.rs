use async_trait::async_trait;
use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

pub struct Report {
    pub lines: usize,
}

#[async_trait]
pub trait Nightly {
    async fn nightly(&self) -> Result<Report, AppError>;
}

pub struct Reports;

#[async_trait]
impl Nightly for Reports {
    #[distributed_lock(key = "nightly-report", skip)]
    async fn nightly(&self) -> Result<Report, AppError> {
        Ok(Report { lines: 0 })
    }
}

fn main() {
    let _ = Reports.nightly();
}
