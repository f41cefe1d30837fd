use distlock::distributed_lock;

// `E` has no `From<distlock::Error>` bound.
#[distributed_lock(key = "order:<id>")]
async fn settle<E>(id: u64) -> Result<u64, E> { Ok(id) }

fn main() {
    let _ = settle::<std::fmt::Error>(1);
}
