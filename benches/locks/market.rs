//! The marketplace of "Redis in Action" §6.2 (the seed chapter): sellers list items, buyers buy
//! them, under three ways of keeping it consistent:
//!
//! * `watch`: optimistic WATCH/MULTI/EXEC; a purchase watches the whole market and the buyer,
//!   so every listing or other purchase in between makes it retry;
//! * `coarse`: one `market` lock (distlock's manual API) around every listing and purchase;
//! * `fine`: a lock per item through `#[distributed_lock(key = "market:<item>")]`.
//!
//! Shared by `benches/locks` (B5) and `examples/market.rs`. Needs the distlock default client
//! (`distlock::init`) and a server it may `FLUSHALL`.
//!
//! Data, as in the book: `users:<id>` hashes with `funds`, `inventory:<id>` sets of item ids,
//! and the `market:` sorted set of `<item>.<seller>` scored by price.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use distlock::distributed_lock;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

const MARKET: &str = "market:";
/// Lease and wait for the market locks: far longer than any listing or purchase takes.
const LOCK_TTL: Duration = Duration::from_secs(10);
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// Buyers pick among the cheapest this many listings.
const PICK_FROM: isize = 16;

/// How the market stays consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Variant {
    /// WATCH/MULTI/EXEC, retried on conflict.
    Watch,
    /// One `market` lock for everything.
    Coarse,
    /// One lock per item, taken by `#[distributed_lock]`.
    Fine,
}

impl Variant {
    /// All variants, in the book's order.
    pub(crate) const ALL: [Variant; 3] = [Variant::Watch, Variant::Coarse, Variant::Fine];

    /// Column label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Variant::Watch => "WATCH/MULTI/EXEC",
            Variant::Coarse => "coarse `market` lock",
            Variant::Fine => "per-item #[distributed_lock]",
        }
    }
}

/// What one run of the market did.
#[derive(Clone, Debug)]
pub(crate) struct MarketRun {
    /// Items listed.
    pub(crate) listed: u64,
    /// Items bought.
    pub(crate) bought: u64,
    /// Purchases that found the item gone (bought by someone else first).
    pub(crate) missed: u64,
    /// WATCH conflicts (listing and purchase attempts run again); always 0 with locks.
    pub(crate) retries: u64,
    /// Mean time of a successful purchase, retries and lock waits included, in ms.
    pub(crate) avg_buy_ms: f64,
    /// 99th percentile of the same, in ms.
    pub(crate) p99_buy_ms: f64,
    /// Measured time.
    pub(crate) elapsed: Duration,
}

/// Errors of a market run.
#[derive(Debug)]
pub(crate) enum MarketError {
    /// A lock could not be taken.
    Lock(distlock::Error),
    /// A Redis command failed.
    Redis(redis::RedisError),
    /// A task panicked or the market's books do not balance.
    Broken(String),
}

impl fmt::Display for MarketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MarketError::Lock(e) => write!(f, "lock: {e}"),
            MarketError::Redis(e) => write!(f, "redis: {e}"),
            MarketError::Broken(why) => write!(f, "market: {why}"),
        }
    }
}

impl std::error::Error for MarketError {}

impl From<distlock::Error> for MarketError {
    fn from(e: distlock::Error) -> Self {
        MarketError::Lock(e)
    }
}

impl From<redis::RedisError> for MarketError {
    fn from(e: redis::RedisError) -> Self {
        MarketError::Redis(e)
    }
}

/// A purchase attempt's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purchase {
    Bought,
    /// The listing is gone or its price changed.
    Missed,
}

/// One listing in `market:`.
struct Listing {
    item: String,
    seller: String,
    price: i64,
}

impl Listing {
    /// Whether a purchase may go ahead, given the listing's current price (`None`: gone) and
    /// the buyer's funds.
    fn can_buy(&self, price: Option<f64>, funds: Option<i64>) -> bool {
        price.map(|p| p.round() as i64) == Some(self.price) && funds.unwrap_or(0) >= self.price
    }
}

/// Runs `op` under the one `market` lock (the coarse variant); the lock is released even if
/// `op` fails.
async fn under_market_lock<T>(
    op: impl Future<Output = Result<T, MarketError>>,
) -> Result<T, MarketError> {
    let guard = distlock::lock("market")
        .ttl(LOCK_TTL)
        .wait(LOCK_WAIT)
        .acquire()
        .await?;
    let outcome = op.await;
    guard.release().await?;
    outcome
}

/// Runs the market for `duration` with `sellers` listing and `buyers` buying.
pub(crate) async fn run(
    url: &str,
    variant: Variant,
    sellers: usize,
    buyers: usize,
    duration: Duration,
) -> Result<MarketRun, MarketError> {
    let redis = redis::Client::open(url)?;
    let mut admin = redis.get_multiplexed_async_connection().await?;
    redis::cmd("FLUSHALL").exec_async(&mut admin).await?;
    for b in 0..buyers {
        redis::cmd("HSET")
            .arg(format!("users:buyer{b}"))
            .arg("funds")
            .arg(1_000_000_000_000i64)
            .exec_async(&mut admin)
            .await?;
    }
    let end = Instant::now() + duration;
    let mut handles = Vec::new();
    for s in 0..sellers {
        // Each participant has its own connection: WATCH state belongs to a connection.
        let conn = redis.get_multiplexed_async_connection().await?;
        handles.push(tokio::spawn(seller(conn, variant, s, end)));
    }
    for b in 0..buyers {
        let conn = redis.get_multiplexed_async_connection().await?;
        handles.push(tokio::spawn(buyer(conn, variant, b, end)));
    }
    let start = Instant::now();
    let mut total = Tally::default();
    for h in handles {
        let tally = h
            .await
            .map_err(|e| MarketError::Broken(format!("task failed: {e}")))??;
        total.merge(tally);
    }
    let elapsed = start.elapsed();
    check_books(&mut admin, &total).await?;
    let mut latencies = total.buy_nanos;
    latencies.sort_unstable();
    let avg_buy_ms = if latencies.is_empty() {
        f64::NAN
    } else {
        latencies.iter().map(|&n| n as f64).sum::<f64>() / latencies.len() as f64 / 1e6
    };
    let p99_buy_ms = match latencies.len() {
        0 => f64::NAN,
        n => latencies[((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1] as f64 / 1e6,
    };
    Ok(MarketRun {
        listed: total.listed,
        bought: total.bought,
        missed: total.missed,
        retries: total.retries,
        avg_buy_ms,
        p99_buy_ms,
        elapsed,
    })
}

#[derive(Default)]
struct Tally {
    listed: u64,
    bought: u64,
    missed: u64,
    retries: u64,
    buy_nanos: Vec<u64>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.listed += other.listed;
        self.bought += other.bought;
        self.missed += other.missed;
        self.retries += other.retries;
        self.buy_nanos.extend(other.buy_nanos);
    }
}

/// Every listed item is either still on the market or in a buyer's inventory, exactly once.
async fn check_books(conn: &mut MultiplexedConnection, t: &Tally) -> Result<(), MarketError> {
    let on_market: u64 = redis::cmd("ZCARD").arg(MARKET).query_async(conn).await?;
    if on_market + t.bought != t.listed {
        return Err(MarketError::Broken(format!(
            "{} listed but {} bought + {on_market} on the market",
            t.listed, t.bought
        )));
    }
    Ok(())
}

async fn seller(
    mut conn: MultiplexedConnection,
    variant: Variant,
    id: usize,
    end: Instant,
) -> Result<Tally, MarketError> {
    let seller = format!("seller{id}");
    let inventory = format!("inventory:{seller}");
    let mut rng = Rng::new(id as u64 + 1);
    let mut tally = Tally::default();
    let mut n = 0u64;
    while Instant::now() < end {
        // The item comes into the seller's inventory (not part of the measured work).
        let item = format!("s{id}i{n}");
        n += 1;
        redis::cmd("SADD")
            .arg(&inventory)
            .arg(&item)
            .exec_async(&mut conn)
            .await?;
        let price = 10 + rng.below(91) as i64;
        let listed = match variant {
            Variant::Watch => {
                list_watched(&mut conn, &seller, &item, price, &mut tally.retries).await?
            }
            Variant::Coarse => {
                under_market_lock(list_checked(&mut conn, &seller, &item, price)).await?
            }
            Variant::Fine => list_item_locked(&mut conn, &seller, &item, price).await?,
        };
        if listed {
            tally.listed += 1;
        }
    }
    Ok(tally)
}

async fn buyer(
    mut conn: MultiplexedConnection,
    variant: Variant,
    id: usize,
    end: Instant,
) -> Result<Tally, MarketError> {
    let buyer = format!("buyer{id}");
    let mut rng = Rng::new(1000 + id as u64);
    let mut tally = Tally::default();
    while Instant::now() < end {
        let cheapest: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(MARKET)
            .arg(0)
            .arg(PICK_FROM - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        if cheapest.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let (member, price) = &cheapest[rng.below(cheapest.len() as u64) as usize];
        let Some((item, seller)) = member.rsplit_once('.') else {
            return Err(MarketError::Broken(format!("bad market member {member}")));
        };
        let listing = Listing {
            item: item.to_owned(),
            seller: seller.to_owned(),
            price: price.round() as i64,
        };
        let t0 = Instant::now();
        let outcome = match variant {
            Variant::Watch => {
                purchase_watched(&mut conn, &buyer, &listing, &mut tally.retries).await?
            }
            Variant::Coarse => {
                under_market_lock(purchase_checked(&mut conn, &buyer, &listing)).await?
            }
            Variant::Fine => {
                purchase_item_locked(&mut conn, &buyer, &listing.item, &listing).await?
            }
        };
        match outcome {
            Purchase::Bought => {
                tally.bought += 1;
                tally.buy_nanos.push(t0.elapsed().as_nanos() as u64);
            }
            Purchase::Missed => tally.missed += 1,
        }
    }
    Ok(tally)
}

/// Moves an item from the seller's inventory to the market, if the seller still has it.
/// Runs under a lock (nothing else changes the item meanwhile).
async fn list_checked(
    conn: &mut MultiplexedConnection,
    seller: &str,
    item: &str,
    price: i64,
) -> Result<bool, MarketError> {
    if !has_item(conn, seller, item).await? {
        return Ok(false);
    }
    list(seller, item, price).exec_async(conn).await?;
    Ok(true)
}

/// The book's `list_item`: WATCH the inventory, check, MULTI/EXEC, retry on conflict.
async fn list_watched(
    conn: &mut MultiplexedConnection,
    seller: &str,
    item: &str,
    price: i64,
    retries: &mut u64,
) -> Result<bool, MarketError> {
    loop {
        redis::cmd("WATCH")
            .arg(format!("inventory:{seller}"))
            .exec_async(conn)
            .await?;
        if !has_item(conn, seller, item).await? {
            redis::cmd("UNWATCH").exec_async(conn).await?;
            return Ok(false);
        }
        let done: Option<Vec<redis::Value>> = list(seller, item, price).query_async(conn).await?;
        if done.is_some() {
            return Ok(true);
        }
        *retries += 1;
    }
}

/// Whether the item is still in the seller's inventory.
async fn has_item(
    conn: &mut MultiplexedConnection,
    seller: &str,
    item: &str,
) -> Result<bool, MarketError> {
    Ok(redis::cmd("SISMEMBER")
        .arg(format!("inventory:{seller}"))
        .arg(item)
        .query_async(conn)
        .await?)
}

/// MULTI: put the item on the market, take it out of the seller's inventory.
fn list(seller: &str, item: &str, price: i64) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("ZADD")
        .arg(MARKET)
        .arg(price)
        .arg(format!("{item}.{seller}"))
        .ignore()
        .cmd("SREM")
        .arg(format!("inventory:{seller}"))
        .arg(item)
        .ignore();
    pipe
}

/// Buys a listing if it is still there at its price and the buyer can pay.
/// Runs under a lock (nothing else changes the listing meanwhile).
async fn purchase_checked(
    conn: &mut MultiplexedConnection,
    buyer: &str,
    l: &Listing,
) -> Result<Purchase, MarketError> {
    let member = format!("{}.{}", l.item, l.seller);
    let (price, funds): (Option<f64>, Option<i64>) = redis::pipe()
        .cmd("ZSCORE")
        .arg(MARKET)
        .arg(&member)
        .cmd("HGET")
        .arg(format!("users:{buyer}"))
        .arg("funds")
        .query_async(conn)
        .await?;
    if !l.can_buy(price, funds) {
        return Ok(Purchase::Missed);
    }
    transfer(buyer, l, &member).exec_async(conn).await?;
    Ok(Purchase::Bought)
}

/// The book's `purchase_item`: WATCH the market and the buyer, check, MULTI/EXEC, retry.
async fn purchase_watched(
    conn: &mut MultiplexedConnection,
    buyer: &str,
    l: &Listing,
    retries: &mut u64,
) -> Result<Purchase, MarketError> {
    let member = format!("{}.{}", l.item, l.seller);
    let buyer_key = format!("users:{buyer}");
    loop {
        redis::cmd("WATCH")
            .arg(MARKET)
            .arg(&buyer_key)
            .exec_async(conn)
            .await?;
        let price: Option<f64> = redis::cmd("ZSCORE")
            .arg(MARKET)
            .arg(&member)
            .query_async(conn)
            .await?;
        let funds: Option<i64> = redis::cmd("HGET")
            .arg(&buyer_key)
            .arg("funds")
            .query_async(conn)
            .await?;
        if !l.can_buy(price, funds) {
            redis::cmd("UNWATCH").exec_async(conn).await?;
            return Ok(Purchase::Missed);
        }
        let done: Option<Vec<redis::Value>> = transfer(buyer, l, &member).query_async(conn).await?;
        if done.is_some() {
            return Ok(Purchase::Bought);
        }
        *retries += 1;
    }
}

/// MULTI: pay the seller, charge the buyer, hand over the item, take it off the market.
fn transfer(buyer: &str, l: &Listing, member: &str) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("HINCRBY")
        .arg(format!("users:{}", l.seller))
        .arg("funds")
        .arg(l.price)
        .ignore()
        .cmd("HINCRBY")
        .arg(format!("users:{buyer}"))
        .arg("funds")
        .arg(-l.price)
        .ignore()
        .cmd("SADD")
        .arg(format!("inventory:{buyer}"))
        .arg(&l.item)
        .ignore()
        .cmd("ZREM")
        .arg(MARKET)
        .arg(member)
        .ignore();
    pipe
}

/// Lists one item under that item's lock.
#[distributed_lock(key = "market:<item>", ttl = "10s", wait = "10s")]
async fn list_item_locked(
    conn: &mut MultiplexedConnection,
    seller: &str,
    item: &str,
    price: i64,
) -> Result<bool, MarketError> {
    list_checked(conn, seller, item, price).await
}

/// Buys one item under that item's lock.
#[distributed_lock(key = "market:<item>", ttl = "10s", wait = "10s")]
async fn purchase_item_locked(
    conn: &mut MultiplexedConnection,
    buyer: &str,
    item: &str,
    listing: &Listing,
) -> Result<Purchase, MarketError> {
    purchase_checked(conn, buyer, listing).await
}

/// xorshift64: enough randomness to pick prices and listings, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
