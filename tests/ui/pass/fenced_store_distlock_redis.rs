use std::time::Duration;

use distlock::fence::redis::FencedStore;

// The fenced store's connection opened through `distlock::redis`: the redis-rs (1.x) distlock
// is built on, whatever version of redis the application depends on itself
// (fail/fenced_store_other_redis.rs: the error when it is 0.32's).
async fn ledger(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let conn = distlock::redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut store = FencedStore::new(conn, Duration::from_secs(60));
    let fence = distlock::Fence::new("ledger:7", 1);
    store.set("entries:{ledger:7}", "entry", &fence).await?;
    Ok(())
}

fn main() {
    let _ = ledger("redis://127.0.0.1:6379/");
}
