//! A ledger transfer under `key = [...]`: moving money between two accounts needs both of them,
//! and two transfers in opposite directions (`7 → 3` and `3 → 7`) taking one account each and
//! waiting for the other would deadlock. `#[distributed_lock(key = ["account:<from>",
//! "account:<to>"])]` takes both locks at once, all or none: the names are sorted before
//! anything is sent, a busy account makes the transfer wait holding nothing, and `from == to`
//! is one lock.
//!
//! Here 3 "processes" (separate clients) make 40 transfers each between 5 accounts kept in
//! Redis, in random directions, reading and writing the balances with a pause in between (so a
//! transfer without both locks would lose money). The example prints the transfers made and
//! the total, which stays what it was.
//!
//! Run with `cargo run -p distlock-examples --example ledger_transfer` (starts its own Redis,
//! or set `REDIS_URL`).

use std::time::{Duration, Instant};

use distlock::{distributed_lock, Config};
use redis::AsyncCommands;

const ACCOUNTS: u64 = 5;
const OPENING: i64 = 1_000;

#[derive(Debug)]
enum LedgerError {
    Lock(distlock::Error),
    Store(redis::RedisError),
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::Lock(e) => write!(f, "lock: {e}"),
            LedgerError::Store(e) => write!(f, "store: {e}"),
        }
    }
}

impl std::error::Error for LedgerError {}

impl From<distlock::Error> for LedgerError {
    fn from(e: distlock::Error) -> Self {
        LedgerError::Lock(e)
    }
}

impl From<redis::RedisError> for LedgerError {
    fn from(e: redis::RedisError) -> Self {
        LedgerError::Store(e)
    }
}

/// The balances, in Redis (a stand-in for the ledger's database).
#[derive(Clone)]
struct Ledger {
    store: redis::aio::MultiplexedConnection,
}

impl Ledger {
    /// Moves `cents` from one account to another; both accounts are held for the whole move,
    /// whichever order other transfers name them in.
    #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "5s", renew, wait = "10s", client = "a")]
    async fn transfer_a(&self, from: u64, to: u64, cents: i64) -> Result<(), LedgerError> {
        self.apply(from, to, cents).await
    }

    // One function per client only because this single program plays three processes; a real
    // service has one client and one function.
    #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "5s", renew, wait = "10s", client = "b")]
    async fn transfer_b(&self, from: u64, to: u64, cents: i64) -> Result<(), LedgerError> {
        self.apply(from, to, cents).await
    }

    #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "5s", renew, wait = "10s", client = "c")]
    async fn transfer_c(&self, from: u64, to: u64, cents: i64) -> Result<(), LedgerError> {
        self.apply(from, to, cents).await
    }

    /// Read both balances, think, write both: correct only under both locks.
    async fn apply(&self, from: u64, to: u64, cents: i64) -> Result<(), LedgerError> {
        let mut store = self.store.clone();
        let a: i64 = store.get(format!("balance:{from}")).await?;
        let b: i64 = store.get(format!("balance:{to}")).await?;
        tokio::time::sleep(Duration::from_millis(2)).await;
        if from != to {
            let _: () = store.set(format!("balance:{from}"), a - cents).await?;
            let _: () = store.set(format!("balance:{to}"), b + cents).await?;
        }
        Ok(())
    }
}

async fn total(store: &mut redis::aio::MultiplexedConnection) -> Result<i64, LedgerError> {
    let mut sum = 0;
    for account in 0..ACCOUNTS {
        let balance: i64 = store.get(format!("balance:{account}")).await?;
        sum += balance;
    }
    Ok(sum)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());
    for name in ["a", "b", "c"] {
        Config::new(url.clone()).install_as(name).await?;
    }
    let mut store = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    for account in 0..ACCOUNTS {
        let _: () = store.set(format!("balance:{account}"), OPENING).await?;
    }
    let before = total(&mut store).await?;
    let ledger = Ledger {
        store: store.clone(),
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (p, process) in ["a", "b", "c"].into_iter().enumerate() {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            // A small deterministic shuffle of directions per "process".
            let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ (p as u64 + 1);
            for _ in 0..40 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let (from, to, cents) = (
                    seed % ACCOUNTS,
                    (seed >> 8) % ACCOUNTS,
                    (seed >> 16) as i64 % 100,
                );
                match process {
                    "a" => ledger.transfer_a(from, to, cents).await?,
                    "b" => ledger.transfer_b(from, to, cents).await?,
                    _ => ledger.transfer_c(from, to, cents).await?,
                }
            }
            Ok::<_, LedgerError>(40)
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += task.await.expect("a transfer task panicked")?;
    }
    let after = total(&mut store).await?;
    println!(
        "{done} transfers between {ACCOUNTS} accounts in {:?}; total {before} before, {after} after",
        started.elapsed()
    );
    assert_eq!(before, after, "money is neither made nor lost");
    Ok(())
}
