//! The server's wall clock stepped forward, as far as a test can without changing the real
//! clock: what a step does to the keys (Redis keeps expiries as wall-clock dates), and what the
//! server checks read (`deploy::check_faults`).

use std::collections::HashSet;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::deploy::check_faults;
use crate::lease::millis_ceil;
use crate::testing::server::TestRedis;

/// Keys moved by one transaction.
const BATCH: usize = 256;

/// Transactions a batch may lose to writes of the same keys (a renewal) before the step gives
/// up: far more than a renewal rate can cause.
const ATTEMPTS: usize = 100;

impl TestRedis {
    /// Steps the server's wall clock forward by `by`, as `date -s`, an NTP step after a long
    /// drift or a VM resumed from a snapshot would. Redis keeps a key's expiry as a wall-clock
    /// date, so every key's expiry comes `by` earlier: a lock with less than `by` left is gone
    /// at once, on the server, with nothing said to its holder. Then the server checks
    /// ([`Config::server_check`]) of every client of the server read its clock `by` further
    /// ahead from now on, and each counts the step as it counts a real one (a warning, the
    /// `clock_step` server event) and confirms every lease at once: the holder of a lock the
    /// step expired is told [`LossReason::Expired`] within a round trip, its body cancelled.
    /// A lock with more than `by` left is kept, and its holder keeps believing.
    ///
    /// The server's own clock does not move (that takes an `LD_PRELOAD` shim): deadlines a
    /// script keeps *inside* a value in server time are not moved: those of a semaphore's
    /// permits and of read holds (scores of the holders' sorted set), and of waiters in the
    /// queue. Such a hold is gone only if the step also passes its key's expiry. The keys of
    /// database 0 are moved (the one the kit's URLs select). Every client of the server sees
    /// the step: step a private server ([`TestRedis::start`]), not the one
    /// [`init`](crate::testing::init) shares between the tests of the process.
    ///
    /// [`Config::server_check`]: crate::Config::server_check
    /// [`LossReason::Expired`]: crate::LossReason::Expired
    ///
    /// # Panics
    ///
    /// If `by` is under a millisecond, or the server cannot be asked.
    pub async fn step_clock(&self, by: Duration) {
        assert!(
            by >= Duration::from_millis(1),
            "distlock::testing: step_clock({by:?}): a step is at least 1 ms"
        );
        let run_id = self.run_id().await;
        let mut conn = self.connection().await;
        let keys = every_key(&mut conn).await;
        for batch in keys.chunks(BATCH) {
            bring_expiries_forward(&mut conn, batch, millis_ceil(by)).await;
        }
        // Only now: a check that counted the step before the keys moved would confirm leases
        // that are still there, and miss their early expiry.
        check_faults::step_clock(&run_id, by);
    }
}

/// Every key of the database (`SCAN`, which may return a key twice: once each here).
async fn every_key(conn: &mut MultiplexedConnection) -> Vec<Vec<u8>> {
    let mut keys = HashSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: step_clock: SCAN: {e}"));
        keys.extend(batch);
        if next == 0 {
            return keys.into_iter().collect();
        }
        cursor = next;
    }
}

/// Moves each of `keys`' expiry `by_ms` earlier (deleting those it passes) in one
/// transaction, tried again if one of them was written meanwhile (`WATCH`): a renewal sent
/// after the step extends from the stepped clock, and must not be cut short.
async fn bring_expiries_forward(conn: &mut MultiplexedConnection, keys: &[Vec<u8>], by_ms: u64) {
    let by_ms = i64::try_from(by_ms).unwrap_or(i64::MAX);
    let failed = |e: redis::RedisError| -> ! { panic!("distlock::testing: step_clock: {e}") };
    for _ in 0..ATTEMPTS {
        redis::cmd("WATCH")
            .arg(keys)
            .exec_async(conn)
            .await
            .unwrap_or_else(|e| failed(e));
        let mut ask = redis::pipe();
        for key in keys {
            ask.cmd("PTTL").arg(key);
        }
        let left: Vec<i64> = ask.query_async(conn).await.unwrap_or_else(|e| failed(e));
        let mut step = redis::pipe();
        step.atomic();
        let mut moved = 0;
        for (key, left) in keys.iter().zip(left).filter(|(_, left)| *left > 0) {
            moved += 1;
            match left - by_ms {
                ..=0 => step.cmd("DEL").arg(key),
                rest => step.cmd("PEXPIRE").arg(key).arg(rest),
            };
        }
        if moved == 0 {
            let unwatch = redis::cmd("UNWATCH").exec_async(conn).await;
            return unwatch.unwrap_or_else(|e| failed(e));
        }
        // EXEC answers nil when a watched key was written: nothing was applied.
        let applied: Option<Vec<Value>> =
            step.query_async(conn).await.unwrap_or_else(|e| failed(e));
        if applied.is_some() {
            return;
        }
    }
    panic!("distlock::testing: step_clock: keys kept changing through {ATTEMPTS} tries");
}
