//! `#[distributed_lock]` at run time against a real redis-server: release on every exit path,
//! cancellation on loss, re-entry, fencing tokens, `skip`, `wait`, named clients, methods.
//!
//! The client registry is process-wide, so every test here shares one server, one runtime and
//! one `distlock::init`, and uses its own lock names.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use distlock::testing::TestRedis;
use distlock::{distributed_lock, Config, Error};
use testkit::eventually;
use tokio::runtime::Runtime;
use tokio::time::Instant;

struct Shared {
    /// A `distlock::testing` server: unlike the testkit's, it stops with the test process even
    /// though this static is never dropped.
    server: TestRedis,
    rt: Runtime,
}

impl Shared {
    /// A plain connection to the shared server.
    async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let server = TestRedis::start().expect("redis-server");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            Config::new(server.url())
                .response_timeout(Duration::from_millis(500))
                .install()
                .await
                .unwrap();
            Config::new(server.url())
                .key_prefix("other")
                .install_as("other")
                .await
                .unwrap();
        });
        Shared { server, rt }
    })
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    shared().rt.block_on(f)
}

async fn is_held(name: &str) -> bool {
    let mut conn = shared().conn().await;
    redis::cmd("EXISTS")
        .arg(format!("distlock:{{{name}}}"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Waits until the lock is free (releases after drops run in the background).
async fn freed(name: &str) {
    let name = name.to_owned();
    eventually(Duration::from_secs(2), "lock released", || {
        let name = name.clone();
        async move { (!is_held(&name).await).then_some(()) }
    })
    .await;
}

#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    Body(&'static str),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Lock(match e {
            Error::Busy { .. } => "busy".into(),
            Error::Lost { reason, .. } => format!("lost: {reason:?}"),
            other => other.to_string(),
        })
    }
}

#[distributed_lock(key = "exit:<case>", ttl = "5s")]
async fn exit_paths(case: &str, fail: bool) -> Result<u32, AppError> {
    assert!(
        is_held(&format!("exit:{case}")).await,
        "body runs under the lock"
    );
    let parsed: u32 = if fail {
        Err(AppError::Body("bad input"))?
    } else {
        7
    };
    if case == "early" {
        return Ok(parsed + 1);
    }
    if case == "panic" {
        panic!("boom");
    }
    Ok(parsed)
}

#[test]
fn releases_on_return_question_mark_and_early_return() {
    run(async {
        assert_eq!(exit_paths("ok", false).await, Ok(7));
        // The release goes out without `run` waiting for it (at the caller's next await):
        // another connection, this check's, may see the lock a moment longer.
        freed("exit:ok").await;
        assert_eq!(
            exit_paths("err", true).await,
            Err(AppError::Body("bad input"))
        );
        freed("exit:err").await;
        assert_eq!(exit_paths("early", false).await, Ok(8));
        freed("exit:early").await;
    });
}

#[test]
fn releases_on_panic() {
    run(async {
        let joined = tokio::spawn(exit_paths("panic", false)).await;
        assert!(joined.unwrap_err().is_panic());
        freed("exit:panic").await;
    });
}

#[distributed_lock(key = "slow:<id>", ttl = "30s", renew)]
async fn slow(id: u32, started: Arc<tokio::sync::Notify>) -> Result<(), AppError> {
    started.notify_one();
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

#[test]
fn releases_promptly_when_the_caller_drops_the_future() {
    run(async {
        let started = Arc::new(tokio::sync::Notify::new());
        let call = slow(1, started.clone());
        let timed = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::select! {
                r = call => r,
                () = async { started.notified().await; } => Ok(()),
            }
        });
        timed.await.unwrap().unwrap();
        let dropped_at = Instant::now();
        freed("slow:1").await;
        assert!(
            dropped_at.elapsed() < Duration::from_secs(2),
            "not held until the 30 s ttl"
        );
    });
}

#[distributed_lock(key = "lease:<id>", ttl = "300ms")]
async fn outlives_lease(id: u32, finished: Arc<AtomicUsize>) -> Result<(), AppError> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    finished.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "stolen:<id>", ttl = "900ms", renew)]
async fn gets_stolen(id: u32, finished: Arc<AtomicUsize>) -> Result<(), AppError> {
    // Our lock is taken away (an operator, an expiry after a pause...): the fault kit's.
    let server = &shared().server;
    server.expire_lock(&format!("stolen:{id}")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    finished.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn body_is_cancelled_when_the_lease_cannot_be_guaranteed() {
    run(async {
        let finished = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let r = outlives_lease(1, finished.clone()).await;
        assert_eq!(r, Err(AppError::Lock("lost: LeaseElapsed".into())));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "cancelled at the lease end"
        );

        let started = Instant::now();
        let r = gets_stolen(1, finished.clone()).await;
        assert_eq!(r, Err(AppError::Lock("lost: Expired".into())));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "cancelled at once: the kit has the holder confirm its lease"
        );
        assert_eq!(
            finished.load(Ordering::SeqCst),
            0,
            "no body ran to completion unprotected"
        );
    });
}

#[distributed_lock(key = "acct:<id>", ttl = "5s", fenced)]
async fn outer(id: u32) -> Result<(u64, u64, Option<u64>), AppError> {
    let mine = distlock::fencing_token().unwrap();
    let nested = inner(id).await?;
    // A spawned task is another owner: it finds the lock busy instead of re-entering.
    let spawned = tokio::spawn(inner(id)).await.unwrap();
    assert_eq!(spawned, Err(AppError::Lock("busy".into())));
    Ok((mine, nested, distlock::fencing_token()))
}

#[distributed_lock(key = "acct:<id>", ttl = "5s", fenced)]
async fn inner(id: u32) -> Result<u64, AppError> {
    Ok(distlock::fencing_token().unwrap())
}

#[distributed_lock(key = "plain:<id>", ttl = "5s")]
async fn unfenced(id: u32) -> Result<Option<u64>, AppError> {
    Ok(distlock::fencing_token())
}

#[test]
fn nested_calls_reenter_and_share_the_token() {
    run(async {
        assert_eq!(unfenced(9).await, Ok(None), "no token without `fenced`");
        let (outer_token, inner_token, after) = outer(9).await.unwrap();
        assert_eq!(outer_token, inner_token);
        assert_eq!(
            after,
            Some(outer_token),
            "innermost token restored after the nested call"
        );
        freed("acct:9").await;
        assert_eq!(
            distlock::fencing_token(),
            None,
            "no token outside a locked body"
        );
        let next = inner(9).await.unwrap();
        assert!(next > outer_token, "fresh acquisition, larger token");
    });
}

#[distributed_lock(key = "cron:<job>", ttl = "5s", skip)]
async fn cron(
    job: &str,
    gate: Arc<tokio::sync::Barrier>,
    ran: Arc<AtomicUsize>,
) -> Result<Option<u32>, AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    gate.wait().await;
    Ok(Some(1))
}

#[test]
fn skip_returns_default_when_busy() {
    run(async {
        let gate = Arc::new(tokio::sync::Barrier::new(2));
        let ran = Arc::new(AtomicUsize::new(0));
        let first = tokio::spawn(cron("nightly", gate.clone(), ran.clone()));
        eventually(
            Duration::from_secs(2),
            "first run holds the lock",
            || async { is_held("cron:nightly").await.then_some(()) },
        )
        .await;
        let second = cron("nightly", gate.clone(), ran.clone()).await;
        assert_eq!(second, Ok(None), "skipped with Default");
        gate.wait().await;
        assert_eq!(first.await.unwrap(), Ok(Some(1)));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    });
}

#[distributed_lock(key = "queue:<id>", ttl = "5s", wait = "3s")]
async fn queued(id: u32, inside: Arc<AtomicUsize>, max: Arc<AtomicUsize>) -> Result<(), AppError> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    max.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "queue:<id>", ttl = "5s")]
async fn impatient(id: u32) -> Result<(), AppError> {
    Ok(())
}

#[test]
fn wait_serialises_callers_and_busy_is_an_error_without_it() {
    run(async {
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let calls: Vec<_> = (0..10)
            .map(|_| tokio::spawn(queued(5, inside.clone(), max.clone())))
            .collect();
        for c in calls {
            c.await.unwrap().unwrap();
        }
        assert_eq!(max.load(Ordering::SeqCst), 1, "never two bodies at once");

        let holder = distlock::lock("queue:6").acquire().await.unwrap();
        assert_eq!(impatient(6).await, Err(AppError::Lock("busy".into())));
        holder.release().await.unwrap();
        assert_eq!(impatient(6).await, Ok(()));
    });
}

struct Tenant {
    name: String,
}

struct Req {
    user: u64,
}

impl Tenant {
    #[distributed_lock(key = "user:<self.name>:<req.user>", ttl = "5s", client = "other")]
    async fn update(&self, req: &Req) -> Result<String, AppError> {
        let mut conn = shared().conn().await;
        let held: bool = redis::cmd("EXISTS")
            .arg("other:{user:acme:7}")
            .query_async(&mut conn)
            .await
            .unwrap();
        Ok(format!("{}:{}:{held}", self.name, req.user))
    }
}

#[test]
fn methods_field_paths_and_named_clients() {
    run(async {
        let t = Tenant {
            name: "acme".into(),
        };
        assert_eq!(t.update(&Req { user: 7 }).await, Ok("acme:7:true".into()));
    });
}

#[distributed_lock(key = "esc:<a>:<b>", ttl = "5s")]
async fn escaped(a: &str, b: &str) -> Result<Vec<String>, AppError> {
    let mut conn = shared().conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:{esc:*}")
        .query_async(&mut conn)
        .await
        .unwrap();
    Ok(keys)
}

#[test]
fn values_with_separators_and_braces_make_distinct_safe_keys() {
    run(async {
        // Without escaping both would be `esc:1:2:3`.
        assert_eq!(
            escaped("1:2", "3").await,
            Ok(vec!["distlock:{esc:1%3A2:3}".to_owned()])
        );
        assert_eq!(
            escaped("1", "2:3").await,
            Ok(vec!["distlock:{esc:1:2:3}".to_owned()])
        );
        // Braces in values never reach the key (they would pick the hash slot).
        assert_eq!(
            escaped("{x}", "}").await,
            Ok(vec!["distlock:{esc:%7Bx%7D:%7D}".to_owned()])
        );
        let long = "v".repeat(2000);
        let err = escaped(&long, "b").await.unwrap_err();
        assert!(
            matches!(err, AppError::Lock(ref m) if m.contains("invalid lock key")),
            "{err:?}"
        );
    });
}

#[async_trait::async_trait]
trait Settle {
    async fn settle(&self, id: u64) -> Result<u64, AppError>;
}

struct Settler;

#[async_trait::async_trait]
impl Settle for Settler {
    #[distributed_lock(key = "settle:<id>", ttl = "5s", fenced)]
    async fn settle(&self, id: u64) -> Result<u64, AppError> {
        assert!(is_held(&format!("settle:{id}")).await);
        Ok(distlock::fencing_token().unwrap())
    }
}

trait Native {
    async fn native(&self, id: u64) -> Result<u64, AppError>;
}

impl Native for Settler {
    #[distributed_lock(key = "native:<id>", ttl = "5s")]
    async fn native(&self, id: u64) -> Result<u64, AppError> {
        assert!(is_held(&format!("native:{id}")).await);
        Ok(id)
    }
}

#[distributed_lock(key = "generic:<key>", ttl = "5s")]
async fn generic<K, V>(key: K, value: impl Into<V>) -> Result<V, AppError>
where
    K: std::fmt::Display + Send,
{
    assert!(is_held(&format!("generic:{key}")).await);
    Ok(value.into())
}

#[test]
fn trait_methods_async_trait_and_generics_lock_at_run_time() {
    run(async {
        let dyn_settler: Box<dyn Settle + Send + Sync> = Box::new(Settler);
        assert!(dyn_settler.settle(1).await.unwrap() > 0);
        freed("settle:1").await;
        assert_eq!(Settler.native(2).await, Ok(2));
        let v: u64 = generic("g", 5u32).await.unwrap();
        assert_eq!(v, 5);
        freed("generic:g").await;
    });
}

#[distributed_lock(key = "daily:<day>", ttl = "5s", skip, min_hold = "2s")]
async fn daily(day: u32) -> Result<Option<u32>, AppError> {
    Ok(Some(day))
}

#[test]
fn skip_with_min_hold_runs_a_fast_job_once() {
    run(async {
        assert_eq!(daily(1).await, Ok(Some(1)), "the first replica runs it");
        // It finished at once, but a replica whose scheduler fires later still skips.
        assert_eq!(daily(1).await, Ok(None));
        assert!(is_held("daily:1").await, "kept for min_hold");
        assert_eq!(daily(2).await, Ok(Some(2)), "another day is another lock");
    });
}

/// The lock's remaining lease in Redis, in milliseconds.
async fn pttl(name: &str) -> i64 {
    let mut conn = shared().conn().await;
    redis::cmd("PTTL")
        .arg(format!("distlock:{{{name}}}"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

const SETTLE_TTL: Duration = Duration::from_millis(1500);

struct Settings;

impl Settings {
    const TTL: Duration = Duration::from_secs(7);
}

#[distributed_lock(key = "ttl:written:<id>", ttl = "1.5s")]
async fn ttl_written(id: u32) -> Result<i64, AppError> {
    Ok(pttl(&format!("ttl:written:{id}")).await)
}

#[distributed_lock(key = "ttl:mixed:<id>", ttl = "1m 30s")]
async fn ttl_mixed(id: u32) -> Result<i64, AppError> {
    Ok(pttl(&format!("ttl:mixed:{id}")).await)
}

#[distributed_lock(key = "ttl:const:<id>", ttl = SETTLE_TTL)]
async fn ttl_const(id: u32) -> Result<i64, AppError> {
    Ok(pttl(&format!("ttl:const:{id}")).await)
}

impl Settings {
    #[distributed_lock(key = "ttl:assoc:<id>", ttl = Self::TTL)]
    async fn ttl_assoc(&self, id: u32) -> Result<i64, AppError> {
        Ok(pttl(&format!("ttl:assoc:{id}")).await)
    }
}

#[test]
fn durations_written_and_constant_reach_redis() {
    run(async {
        for (left, ttl) in [
            (ttl_written(1).await.unwrap(), 1_500),
            (ttl_mixed(1).await.unwrap(), 90_000),
            (ttl_const(1).await.unwrap(), 1_500),
            (Settings.ttl_assoc(1).await.unwrap(), 7_000),
        ] {
            assert!(
                left > ttl - 1_000 && left <= ttl,
                "PTTL {left} ms for a {ttl} ms lease"
            );
        }
    });
}
