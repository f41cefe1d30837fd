use distlock::distributed_lock;

#[derive(Debug)]
pub enum AppError {
    NotFound,
}

pub struct Orders {
    region: String,
}

impl Orders {
    #[distributed_lock(key = "order:<self.region>:<id>")]
    pub async fn settle(&self, id: u64) -> Result<u64, AppError> {
        if id == 0 {
            return Err(AppError::NotFound);
        }
        Ok(id)
    }
}

fn main() {
    let _ = Orders { region: String::new() }.settle(1);
}
