use std::time::Duration;

use distlock::fence::redis::FencedStore;

// An application that depends on `redis = "0.32"` hands the fenced store a connection of that
// redis-rs. distlock is built on redis-rs 1.x: to the compiler the two `MultiplexedConnection`s
// are different types, and the error notes the two versions of `redis` in the graph. The fix
// (pass/fenced_store_distlock_redis.rs): open the connection through `distlock::redis`.
async fn ledger(url: &str) {
    let conn = redis_0_32::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _store = FencedStore::new(conn, Duration::from_secs(60));
}

fn main() {
    let _ = ledger("redis://127.0.0.1:6379/");
}
