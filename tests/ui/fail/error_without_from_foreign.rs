use distlock::distributed_lock;

// A foreign error type with many `From` impls of its own: the error names the one missing
// (`From<distlock::Error>`) and does not list the others.
#[distributed_lock(key = "file:<id>")]
async fn read(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {
    let _ = read(1);
}
