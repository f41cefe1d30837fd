use distlock::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn settle(id: u64) -> Option<u64> {
    Some(id)
}

fn main() {
    let _ = settle(1);
}
