//! An API client limited to 5 concurrent calls fleet-wide: the partner allows each tenant 5
//! requests in flight, whichever of our processes sends them. `permits = 5` makes every call a
//! holder of one of 5 permits of the tenant's semaphore in Redis; a call that finds all 5 in use
//! waits (up to 2 s) for one to be released, and a process that dies frees its permits at their
//! ttl without resetting anyone else's.
//!
//! Here 3 "processes" (separate clients, as separate services would have) send 8 calls each for
//! one tenant; the example counts how many calls are inside at once and prints the most: 5.
//!
//! Run with `cargo run -p distlock-examples --example api_client` (starts its own Redis, or set
//! `REDIS_URL`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::{distributed_lock, Config};

/// The partner's limit per tenant, as every process must agree on it.
const PARTNER_LIMIT: u32 = 5;

#[derive(Debug)]
enum CallError {
    /// All 5 permits stayed in use for the whole wait.
    Throttled,
    Lock(distlock::Error),
}

impl From<distlock::Error> for CallError {
    fn from(e: distlock::Error) -> Self {
        if e.is_busy() {
            CallError::Throttled
        } else {
            CallError::Lock(e)
        }
    }
}

/// Calls in flight in this example, across its clients (what the partner would see).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

struct PartnerApi {
    /// The client this "process" takes its permits through.
    client: &'static str,
}

impl PartnerApi {
    /// One request to the partner, at most `PARTNER_LIMIT` at once per tenant, fleet-wide.
    async fn fetch(&self, tenant: &str, item: u32) -> Result<String, CallError> {
        match self.client {
            "a" => fetch_a(tenant, item).await,
            "b" => fetch_b(tenant, item).await,
            _ => fetch_c(tenant, item).await,
        }
    }
}

/// What a call does while it holds its permit: stands for the HTTP request.
async fn request(tenant: &str, item: u32) -> String {
    let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(60)).await;
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    format!("{tenant}/item-{item}")
}

// One function per client only because this single program plays three processes; a real
// service has one client and one function.
#[distributed_lock(key = "partner-api:<tenant>", permits = PARTNER_LIMIT, ttl = "10s", renew, wait = "2s", client = "a")]
async fn fetch_a(tenant: &str, item: u32) -> Result<String, CallError> {
    Ok(request(tenant, item).await)
}

#[distributed_lock(key = "partner-api:<tenant>", permits = PARTNER_LIMIT, ttl = "10s", renew, wait = "2s", client = "b")]
async fn fetch_b(tenant: &str, item: u32) -> Result<String, CallError> {
    Ok(request(tenant, item).await)
}

#[distributed_lock(key = "partner-api:<tenant>", permits = PARTNER_LIMIT, ttl = "10s", renew, wait = "2s", client = "c")]
async fn fetch_c(tenant: &str, item: u32) -> Result<String, CallError> {
    Ok(request(tenant, item).await)
}

#[tokio::main]
async fn main() -> Result<(), CallError> {
    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());
    for name in ["a", "b", "c"] {
        Config::new(url.clone()).install_as(name).await?;
    }
    let started = Instant::now();
    let mut calls = Vec::new();
    for client in ["a", "b", "c"] {
        for item in 0..8 {
            let api = PartnerApi { client };
            calls.push(tokio::spawn(async move { api.fetch("acme", item).await }));
        }
    }
    let (mut ok, mut throttled) = (0, 0);
    for call in calls {
        match call.await.expect("a call panicked") {
            Ok(_) => ok += 1,
            Err(CallError::Throttled) => throttled += 1,
            Err(CallError::Lock(e)) => return Err(CallError::Lock(e)),
        }
    }
    let most = MOST.load(Ordering::SeqCst);
    println!(
        "{ok} calls done, {throttled} throttled, in {:?}; at most {most} in flight at once (limit {PARTNER_LIMIT})",
        started.elapsed()
    );
    assert!(most <= PARTNER_LIMIT as usize);
    Ok(())
}
