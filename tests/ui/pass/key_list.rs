use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

struct Ledger {
    book: String,
}

impl Ledger {
    /// Two accounts, all or none, with every option a lock takes; `from == to` is one lock.
    #[distributed_lock(key = ["account:<self.book>:<from>", "account:<self.book>:<to>"], ttl = "5s", renew, wait = "2s", fenced, min_hold = "1s", min_replicas = 1)]
    async fn transfer(&self, from: u64, to: u64, amount: i64) -> Result<i64, AppError> {
        let token = distlock::fencing_token_of(&format!("account:{}:{from}", self.book));
        Ok(amount + token.map_or(0, |t| t as i64))
    }
}

/// Three locks, `skip` and a named client; a parameter read only by the key.
#[distributed_lock(key = ["a:<x>", "b:<y>", "c",], skip, client = "jobs")]
async fn three(x: u32, y: &str) -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let ledger = Ledger { book: "main".to_owned() };
    let _ = ledger.transfer(1, 2, 10);
    let _ = three(1, "y");
}
