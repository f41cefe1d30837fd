use async_trait::async_trait;
use distlock::distributed_lock;

#[derive(Debug)]
pub enum AppError {
    NotFound,
}

#[async_trait]
pub trait Settle {
    async fn settle(&self, id: u64) -> Result<u64, AppError>;
}

pub struct Orders;

#[async_trait]
impl Settle for Orders {
    #[distributed_lock(key = "order:<id>")]
    async fn settle(&self, id: u64) -> Result<u64, AppError> {
        Err(AppError::NotFound)
    }
}

fn main() {
    let _ = Orders.settle(1);
}
