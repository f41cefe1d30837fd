//! Scenario 10: bad input. Every case must give a typed error with a clear message (or work,
//! for names that are merely unusual), none may panic, and none may touch another lock: a
//! sentinel lock held by another client is compared before and after.
//!
//! 10a runs in this process: names (very long, Unicode, control and RESP-looking bytes,
//! `{`/`}`/`:`/`<`, empty), invalid URLs, wrong or missing passwords, invalid settings, and at
//! the Redis level a retried release of the same hold and releases by a non-owner.
//! 10b (the client registry, in a worker process) is in `registry_misuse.rs`.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Config, Error, LockGuard};
use redis::aio::MultiplexedConnection;
use testkit::{RedisServer, ServerOptions};
use tokio::time::Instant;

use crate::common::{
    acquire_for, calm_client, lock_fields, lock_hashes, lock_key, lock_state, Settings,
};
use crate::report::{Scenario, Tally};

pub(crate) fn scenario(_: &Settings, budget: Duration) -> Scenario {
    Scenario::new(
        "10a",
        "bad input: names, URLs, passwords, settings, double/foreign release",
        budget,
        run,
    )
}

/// Runs one case on its own task so that a panic is caught and reported as a violation.
async fn case<F>(t: &Tally, name: &str, fut: F)
where
    F: Future<Output = Result<(), String>> + Send + 'static,
{
    t.ops(1);
    match tokio::spawn(fut).await {
        Ok(Ok(())) => {}
        Ok(Err(problem)) => t.violation(format!("{name}: {problem}")),
        Err(e) if e.is_panic() => t.violation(format!("{name}: panicked")),
        Err(e) => t.violation(format!("{name}: {e}")),
    }
}

fn expect_invalid_key(
    result: Result<distlock::LockGuard, Error>,
    what: &str,
) -> Result<(), String> {
    match result {
        Err(e @ Error::InvalidKey { .. }) => {
            let message = e.to_string();
            if message.len() > 400 {
                return Err(format!(
                    "{what}: the InvalidKey message is {} bytes long",
                    message.len()
                ));
            }
            Ok(())
        }
        other => Err(format!(
            "{what}: expected InvalidKey, got {:?}",
            other.map(|g| g.token())
        )),
    }
}

/// A lock held by another client through the scenario: no case may touch it.
pub(super) struct Sentinel {
    guard: LockGuard,
    before: Vec<(String, String)>,
    _client: Client,
}

impl Sentinel {
    pub(super) async fn take(server: &RedisServer, conn: &mut MultiplexedConnection) -> Sentinel {
        let client = calm_client(&server.url()).await;
        let guard = acquire_for(&client, "sentinel", Duration::from_secs(60))
            .await
            .expect("sentinel");
        let before = lock_state(conn, "sentinel").await;
        Sentinel {
            guard,
            before,
            _client: client,
        }
    }

    /// Checks that the sentinel is unchanged and the only lock left, then releases it.
    pub(super) async fn check_and_release(self, t: &Tally, conn: &mut MultiplexedConnection) {
        let (before, after) = (self.before, lock_state(conn, "sentinel").await);
        t.check(after == before, || {
            format!("the sentinel lock changed: {before:?} -> {after:?}")
        });
        let left = lock_hashes(conn).await;
        t.check(left == [lock_key("sentinel")], || {
            format!("lock keys left: {left:?}")
        });
        let released = self.guard.release().await;
        t.check(released.is_ok(), || {
            format!("sentinel release: {released:?}")
        });
    }
}

/// An unusual but valid name works end to end: the lock hash is exactly `distlock:{name}`.
/// (Cases own their client and connection: each runs on its own task.)
async fn round_trip(
    client: Client,
    mut conn: MultiplexedConnection,
    name: String,
) -> Result<(), String> {
    let guard = acquire_for(&client, &name, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let fields = lock_fields(&mut conn, &name).await;
    if fields != 3 {
        return Err(format!("{fields} fields under the exact key"));
    }
    guard.release().await.map_err(|e| e.to_string())?;
    if lock_fields(&mut conn, &name).await != 0 {
        return Err("still held after release".to_owned());
    }
    Ok(())
}

async fn run(t: Arc<Tally>) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let client = calm_client(&server.url()).await;
    let sentinel = Sentinel::take(&server, &mut conn).await;

    // Names.
    let max = distlock::MAX_NAME_LEN;
    let cases: Vec<(&str, String)> = vec![
        ("name of exactly MAX_NAME_LEN bytes", "m".repeat(max)),
        ("multi-byte name at the limit", "é".repeat(max / 2)),
        ("Unicode name", "ünï:cødé→🔒 日本語".to_owned()),
        ("control bytes", "\u{0}\u{1}\u{7f}\u{1b}[31m".to_owned()),
        ("RESP-looking name", "\r\n*1\r\n$4\r\nPING\r\n".to_owned()),
        ("escaped-binary-looking name", "\\xff\\xfe%00%7B".to_owned()),
        ("colons and angle brackets", "a:<id>:b<>:".to_owned()),
        ("whitespace name", " \t ".to_owned()),
    ];
    for (what, name) in cases {
        case(&t, what, round_trip(client.clone(), conn.clone(), name)).await;
    }
    let rejected: Vec<(&str, String)> = vec![
        ("empty name", String::new()),
        ("name one byte over the limit", "x".repeat(max + 1)),
        ("1 MiB name", "y".repeat(1 << 20)),
        ("name with {", "a{b".to_owned()),
        ("name with }", "a}b".to_owned()),
        ("name that is a hash tag", "{sentinel}".to_owned()),
    ];
    for (what, name) in rejected {
        let client = client.clone();
        case(&t, what, async move {
            let started = Instant::now();
            let result = client.lock(name).acquire().await;
            if started.elapsed() > Duration::from_secs(1) {
                return Err("slow rejection".to_owned());
            }
            expect_invalid_key(result, "rejected name")
        })
        .await;
    }
    // Related names are distinct locks.
    {
        let (client, conn) = (client.clone(), conn.clone());
        case(&t, "a, a: and a:b are distinct locks", async move {
            let a = client
                .lock("a")
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            for other in ["a:", "a:b", "A", "a "] {
                round_trip(client.clone(), conn.clone(), other.to_owned())
                    .await
                    .map_err(|e| format!("{other:?} while `a` is held: {e}"))?;
            }
            a.release().await.map_err(|e| e.to_string())
        })
        .await;
    }

    // Settings and URLs: typed errors before any network traffic.
    let bad_configs: Vec<(&str, Config)> = vec![
        ("URL that is not a URL", Config::new("not a url")),
        ("empty URL", Config::new("")),
        ("http URL", Config::new("http://127.0.0.1/")),
        (
            "port that is not a number",
            Config::new("redis://127.0.0.1:notaport/"),
        ),
        (
            "URL with a secret and a bad port",
            Config::new("redis://:Sup3rS3cret@127.0.0.1:99999/"),
        ),
        (
            "prefix with braces",
            Config::new(server.url()).key_prefix("a{b}"),
        ),
        ("empty prefix", Config::new(server.url()).key_prefix("")),
        (
            "zero response timeout",
            Config::new(server.url()).response_timeout(Duration::ZERO),
        ),
        (
            "zero batch size",
            Config::new(server.url()).renew_batch_size(0),
        ),
        (
            "tiny default ttl",
            Config::new(server.url()).default_ttl(Duration::from_millis(1)),
        ),
    ];
    for (what, config) in bad_configs {
        case(&t, what, async move {
            let started = Instant::now();
            match config.connect().await {
                Err(e @ Error::InvalidConfig { .. }) => {
                    let message = e.to_string();
                    if message.contains("Sup3rS3cret") {
                        return Err(format!("the message leaks the password: {message}"));
                    }
                    if started.elapsed() > Duration::from_secs(1) {
                        return Err("slow rejection".to_owned());
                    }
                    Ok(())
                }
                Err(other) => Err(format!("expected InvalidConfig, got {other:?}")),
                Ok(_) => Err("connected".to_owned()),
            }
        })
        .await;
    }
    {
        let client = client.clone();
        case(&t, "zero ttl on a lock", async move {
            match client.lock("zero-ttl").ttl(Duration::ZERO).acquire().await {
                Err(Error::InvalidConfig { .. }) => Ok(()),
                other => Err(format!(
                    "expected InvalidConfig, got {:?}",
                    other.map(|g| g.token())
                )),
            }
        })
        .await;
    }

    // Passwords.
    let secured = RedisServer::start_with(ServerOptions {
        password: Some("Corr3ct-Horse".into()),
        ..Default::default()
    });
    let port = secured.port();
    for (what, url) in [
        (
            "wrong password",
            format!("redis://:Wr0ng-Battery@127.0.0.1:{port}/"),
        ),
        ("missing password", format!("redis://127.0.0.1:{port}/")),
    ] {
        let t2 = t.clone();
        case(&t, what, async move {
            let started = Instant::now();
            // Connecting without credentials may succeed (nothing is sent that needs them);
            // then the first lock must fail with a typed error that says why.
            let result = match Config::new(url)
                .connect_timeout(Duration::from_secs(1))
                .connect()
                .await
            {
                Ok(client) => {
                    t2.note(format!(
                        "{what}: connect() succeeded; the first acquire failed instead"
                    ));
                    client.lock("secured").acquire().await.map(drop)
                }
                Err(e) => Err(e),
            };
            let took = started.elapsed();
            match result {
                Err(e) => {
                    let message = e.to_string();
                    if message.contains("Wr0ng-Battery") || message.contains("Corr3ct-Horse") {
                        return Err(format!("the message leaks a password: {message}"));
                    }
                    if !matches!(e, Error::Connect { .. } | Error::Redis { .. })
                        || !message.to_ascii_lowercase().contains("auth")
                    {
                        return Err(format!("not a clear authentication error: {e:?}"));
                    }
                    if took > Duration::from_secs(5) {
                        return Err(format!("took {took:?}"));
                    }
                    Ok(())
                }
                Ok(()) => Err("locked without the right password".to_owned()),
            }
        })
        .await;
    }
    {
        let url = secured.url();
        case(&t, "right password works", async move {
            let c = Config::new(url)
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            let g = c
                .lock("secured")
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            g.release().await.map_err(|e| e.to_string())
        })
        .await;
    }

    // At the Redis level: a retried release of the same hold, and a foreign release/renewal.
    let retried = retried_release(client.clone(), conn.clone());
    case(&t, "release retried with the same hold", retried).await;
    let foreign = foreign_release(client.clone(), conn.clone());
    case(&t, "release by a non-owner", foreign).await;

    // The sentinel is untouched and nothing else is left.
    t.check(sentinel.guard.ensure_held().is_ok(), || {
        "the sentinel was lost".to_owned()
    });
    sentinel.check_and_release(&t, &mut conn).await;
}

/// The lock's owner and hold fields (`h...`), read from Redis.
async fn owner_and_holds(
    conn: &mut MultiplexedConnection,
    name: &str,
) -> (String, BTreeSet<String>) {
    let state = lock_state(conn, name).await;
    let owner = state
        .iter()
        .find(|(k, _)| k == "o")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let holds = state
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with('h'))
        .collect();
    (owner, holds)
}

/// Runs the release script as the runtime sends it and returns its status code (-2 no lock,
/// -1 another owner, 0 released, n holds left); the reply may carry the request id first.
async fn release_code(
    conn: &mut MultiplexedConnection,
    name: &str,
    owner: &str,
    hold: &str,
) -> Result<i64, String> {
    let reply: redis::Value = redis::cmd("EVAL")
        .arg(distlock::scripts::RELEASE)
        .arg(2)
        .arg(lock_key(name))
        .arg(format!("{}:released", lock_key(name)))
        .arg(owner)
        .arg(hold)
        .arg(0)
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    match &reply {
        redis::Value::Int(code) => Ok(*code),
        redis::Value::Array(items) => match items.last() {
            Some(redis::Value::Int(code)) => Ok(*code),
            _ => Err(format!("unexpected release reply {reply:?}")),
        },
        _ => Err(format!("unexpected release reply {reply:?}")),
    }
}

async fn retried_release(client: Client, mut conn: MultiplexedConnection) -> Result<(), String> {
    let name = "twice";
    let inner_client = client.clone();
    let mut inner_conn = conn.clone();
    client
        .lock(name)
        .ttl(Duration::from_secs(10))
        .run(async move {
            let (owner, outer_holds) = owner_and_holds(&mut inner_conn, name).await;
            let inner = inner_client.lock(name).acquire().await.map_err(|e| e.to_string())?;
            if !inner.is_reentry() {
                return Err("the nested acquire did not re-enter".to_owned());
            }
            let (_, holds) = owner_and_holds(&mut inner_conn, name).await;
            let inner_hold = holds.difference(&outer_holds).next().cloned().ok_or("no new hold field")?;
            // The inner hold's release, sent twice (a retry after a lost reply).
            for attempt in 1..=2 {
                let left = release_code(&mut inner_conn, name, &owner, &inner_hold).await?;
                if left != 1 {
                    return Err(format!("release attempt {attempt} of the inner hold returned {left}, expected 1 hold left"));
                }
                let fields = lock_fields(&mut inner_conn, name).await;
                if fields != 3 {
                    return Err(format!("after release attempt {attempt}: {fields} fields, expected 2 + the outer hold"));
                }
            }
            // The guard's own release of the already released hold changes nothing either.
            inner.release().await.map_err(|e| e.to_string())?;
            if lock_fields(&mut inner_conn, name).await != 3 {
                return Err("the outer hold was released with the inner one".to_owned());
            }
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())??;
    if lock_fields(&mut conn, name).await != 0 {
        return Err("not released after the outer body".to_owned());
    }
    Ok(())
}

async fn foreign_release(client: Client, mut conn: MultiplexedConnection) -> Result<(), String> {
    let name = "foreign";
    let guard = acquire_for(&client, name, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let before = lock_state(&mut conn, name).await;
    let (_, holds) = owner_and_holds(&mut conn, name).await;
    let hold = holds.iter().next().cloned().ok_or("no hold field")?;
    for (owner, hold) in [
        ("intruder:1", hold.as_str()),
        ("intruder:1", "h999999"),
        ("", hold.as_str()),
    ] {
        let left = release_code(&mut conn, name, owner, hold).await?;
        if left != -1 {
            return Err(format!(
                "release by owner {owner:?} returned {left}, expected -1 (not the owner)"
            ));
        }
    }
    if lock_state(&mut conn, name).await != before {
        return Err("the lock hash changed".to_owned());
    }
    guard.release().await.map_err(|e| e.to_string())
}
