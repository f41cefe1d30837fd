use distlock::distributed_lock;

#[derive(Debug)]
pub enum AppError {
    NotFound,
}

trait Settle {
    async fn settle(&self, id: u64) -> Result<u64, AppError>;
}

pub struct Orders;

impl Settle for Orders {
    #[distributed_lock(key = "order:<id>")]
    async fn settle(&self, id: u64) -> Result<u64, AppError> {
        Err(AppError::NotFound)
    }
}

fn main() {
    let _ = Orders.settle(1);
}
