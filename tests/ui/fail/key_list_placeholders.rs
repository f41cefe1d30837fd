use distlock::distributed_lock;

#[path = "../support.rs"]
mod support;

use support::AppError;

// Every template is checked: one error each, at its own literal.
#[distributed_lock(key = ["account:<form>", "account:<to>", "ledger:<self.book>"], ttl = "5s")]
async fn transfer(from: u64, to: u64) -> Result<(), AppError> { Ok(()) }

fn main() {
    let _ = transfer(1, 2);
}
