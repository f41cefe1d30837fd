//! An HTTP-handler-style use: concurrent requests for the same order wait for each other
//! (`wait`), requests for different orders run in parallel, and a request that cannot get the
//! lock in time is answered "409 busy" instead of hanging.
//!
//! Run with `cargo run -p distlock-examples --example http_handler` (starts its own Redis, or set `REDIS_URL`).

use std::time::{Duration, Instant};

use distlock::distributed_lock;

struct Request {
    order_id: u64,
    amount: u64,
}

#[derive(Debug)]
enum HandlerError {
    Busy,
    Internal(String),
}

impl From<distlock::Error> for HandlerError {
    fn from(e: distlock::Error) -> Self {
        if e.is_busy() {
            HandlerError::Busy
        } else {
            HandlerError::Internal(e.to_string())
        }
    }
}

struct OrderService {
    tenant: String,
}

impl OrderService {
    /// One payment per order at a time, per tenant; waits up to 500 ms for a concurrent one.
    #[distributed_lock(
        key = "pay:<self.tenant>:<req.order_id>",
        ttl = "5s",
        wait = "500ms",
        fenced
    )]
    async fn pay(&self, req: &Request) -> Result<String, HandlerError> {
        tokio::time::sleep(Duration::from_millis(150)).await; // talk to the payment provider
        Ok(format!(
            "200 paid {} for order {} (fencing token {})",
            req.amount,
            req.order_id,
            distlock::fencing_token().unwrap_or(0)
        ))
    }
}

fn status(result: &Result<String, HandlerError>) -> String {
    match result {
        Ok(body) => body.clone(),
        Err(HandlerError::Busy) => "409 busy: another payment for this order is in progress".into(),
        Err(HandlerError::Internal(e)) => format!("500 {e}"),
    }
}

#[tokio::main]
async fn main() -> Result<(), HandlerError> {
    let server = std::env::var("REDIS_URL")
        .is_err()
        .then(testkit::RedisServer::start);
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| server.as_ref().unwrap().url());
    distlock::init(url).await?;
    let service = std::sync::Arc::new(OrderService {
        tenant: "acme".into(),
    });

    // Five requests: three for order 1 (serialized; the last may time out), two for others.
    let started = Instant::now();
    let requests = [(1, 10), (1, 20), (2, 30), (1, 40), (3, 50)];
    let handles: Vec<_> = requests
        .into_iter()
        .map(|(order_id, amount)| {
            let service = service.clone();
            tokio::spawn(async move {
                let result = service.pay(&Request { order_id, amount }).await;
                (
                    order_id,
                    amount,
                    started.elapsed(),
                    status(&result),
                    result.is_ok(),
                )
            })
        })
        .collect();
    let mut paid = 0;
    for h in handles {
        let (order, amount, at, status, ok) = h.await.expect("request task");
        println!(
            "order {order} amount {amount:>2} after {:>3} ms: {status}",
            at.as_millis()
        );
        paid += usize::from(ok);
    }
    assert!(
        paid >= 4,
        "different orders run in parallel, same-order requests wait"
    );
    Ok(())
}
