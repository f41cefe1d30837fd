#![deny(warnings)]
//! Tuple-struct patterns, as axum handlers take their extractors: `Path(id): Path<u64>`,
//! `State(app): State<App>`; a pattern-bound name with a field path (`<app.region>`), a name
//! only the key reads, and one only the body reads.

#[path = "../support.rs"]
mod support;

use distlock::distributed_lock;
use support::{AppError, Path, State, assert_send, expect_not_initialized};

// Local stand-ins for axum's extractors: the attribute knows nothing of axum.

#[derive(Clone)]
pub struct App {
    pub region: &'static str,
    pub settled: u32,
}

#[distributed_lock(key = "order:<app.region>:<id>", ttl = "10s", wait = "2s", fenced)]
async fn settle(Path(id): Path<u64>, State(app): State<App>) -> Result<u32, AppError> {
    Ok(app.settled)
}

#[distributed_lock(key = "order:<id>")]
async fn cancel(Path(id): Path<u64>, State(_): State<App>) -> Result<(), AppError> { Ok(()) }

// Two extractors of one tuple type: `Path((shop, id))`.
#[distributed_lock(key = "shop:<shop>:order:<id>", skip)]
async fn refund(Path((shop, id)): Path<(String, u64)>) -> Result<Option<u64>, AppError> {
    Ok(Some(id + shop.len() as u64))
}

fn main() {
    let app = App { region: "eu", settled: 0 };
    expect_not_initialized(assert_send(settle(Path(1), State(app.clone()))));
    expect_not_initialized(cancel(Path(2), State(app)));
    expect_not_initialized(refund(Path(("acme".to_owned(), 3))));
}
