//! The marketplace of "Redis in Action" ch. 6, three ways: WATCH/MULTI/EXEC, one coarse
//! `market` lock, and a lock per item with `#[distributed_lock(key = "market:<item>")]`.
//!
//! ```text
//! cargo run --release -p distlock-examples --example market            # 5 s per run
//! MARKET_SECS=20 cargo run --release -p distlock-examples --example market
//! ```
//!
//! Starts a throwaway `redis-server` on a free loopback port, runs each load shape of the book
//! (1 seller / 1 buyer, 5/1, 5/5) with each variant, and prints a table like the book's 6-1…6-3.
//! The same code is scenario B5 of `cargo bench --bench locks`.

#[path = "../benches/locks/market.rs"]
mod market;

use std::time::Duration;

use market::Variant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: u64 = std::env::var("MARKET_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let server = testkit::RedisServer::start();
    let url = server.url();
    distlock::init(url.as_str()).await?;
    println!("{secs} s per run against redis at {url}\n");
    println!(
        "| sellers/buyers | consistency                  |  listed |  bought | bought/s |  missed | retries | avg buy ms | p99 buy ms |"
    );
    println!(
        "| -------------- | ---------------------------- | ------: | ------: | -------: | ------: | ------: | ---------: | ---------: |"
    );
    for (sellers, buyers) in [(1, 1), (5, 1), (5, 5)] {
        for variant in Variant::ALL {
            let r = market::run(&url, variant, sellers, buyers, Duration::from_secs(secs)).await?;
            println!(
                "| {:>14} | {:<28} | {:>7} | {:>7} | {:>8.0} | {:>7} | {:>7} | {:>10.2} | {:>10.2} |",
                format!("{sellers}/{buyers}"),
                variant.label(),
                r.listed,
                r.bought,
                r.bought as f64 / r.elapsed.as_secs_f64(),
                r.missed,
                r.retries,
                r.avg_buy_ms,
                r.p99_buy_ms
            );
        }
    }
    Ok(())
}
