//! Scenario 10: bad input. Every case must give a typed error with a clear message (or work,
//! for names that are merely unusual), none may panic, and none may touch another lock: a
//! sentinel lock held by another client is compared before and after.
//!
//! 10a runs in this process: names (very long, Unicode, control and RESP-looking bytes,
//! `{`/`}`/`:`/`<`, empty) on both acquire paths (plain and fenced), invalid URLs, wrong or
//! missing passwords, invalid settings, keys under the prefix that are not `d2` locks
//! (`Incompatible`, left untouched), and at the Redis level a retried release of the same
//! lock and releases and renewals by a non-owner.
//! 10b (the client registry, in a worker process) is in `registry_misuse.rs`.
//!
//! The sentinel is taken fenced, so "untouched" covers its owner (the lock key's value) and its
//! fencing token (the fence key).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Config, Error, LockGuard};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::{RedisServer, ServerOptions};
use tokio::time::Instant;

use crate::common::{
    acquire_fenced, acquire_for, agrees_with_redis, calm_client, fence_key, lock_key, lock_keys,
    lock_state, lock_value, Kind, LockState, Settings,
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
    before: LockState,
    _client: Client,
}

impl Sentinel {
    pub(super) async fn take(server: &RedisServer, conn: &mut MultiplexedConnection) -> Sentinel {
        let client = calm_client(&server.url()).await;
        let guard = acquire_fenced(&client, "sentinel", Duration::from_secs(60))
            .await
            .expect("sentinel");
        let before = lock_state(conn, "sentinel").await;
        assert!(
            before.value.is_some() && before.fence == guard.token().map(|t| t.to_string()),
            "the sentinel's lock and fence keys: {before:?}"
        );
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
        let left = lock_keys(conn).await;
        t.check(left == [lock_key("sentinel")], || {
            format!("lock keys left: {left:?}")
        });
        let released = self.guard.release().await;
        t.check(released.is_ok(), || {
            format!("sentinel release: {released:?}")
        });
    }
}

/// An unusual but valid name works end to end on both acquire paths: the lock key is exactly
/// `distlock:{name}` holding a `d2` value with a lease (and, fenced, the fence key
/// `distlock:{name}:fence` holds the guard's token), and the release frees it.
/// (Cases own their client and connection: each runs on its own task.)
async fn round_trip(
    client: Client,
    mut conn: MultiplexedConnection,
    name: String,
) -> Result<(), String> {
    for kind in Kind::BOTH {
        let guard = kind
            .acquire(&client, &name, Duration::from_secs(10))
            .await
            .map_err(|e| format!("{}: {e}", kind.as_str()))?;
        agrees_with_redis(&mut conn, &name, &guard, kind.fenced(), None)
            .await
            .map_err(|e| format!("{} under the exact key: {e}", kind.as_str()))?;
        guard.release().await.map_err(|e| e.to_string())?;
        if lock_value(&mut conn, &name).await.is_some() {
            return Err(format!("still held after release ({})", kind.as_str()));
        }
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

    // Keys under the prefix that are not d2 locks.
    let layout = foreign_layout(client.clone(), conn.clone());
    case(&t, "key of another layout under the prefix", layout).await;

    // At the Redis level: a retried release of the same lock, and a foreign release/renewal.
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

/// Keys under the prefix that are not `d2` locks: a hash (a lock as the previous protocol wrote
/// it) and another program's string. Both acquire paths report `Incompatible` naming the lock,
/// and change nothing: the key stays as it was and no fence key appears.
async fn foreign_layout(client: Client, mut conn: MultiplexedConnection) -> Result<(), String> {
    let (hash, string) = ("old-layout", "other-program");
    let err = |e: redis::RedisError| e.to_string();
    let () = conn
        .hset_multiple(lock_key(hash), &[("o", "owner:1"), ("f", "7"), ("h1", "1")])
        .await
        .map_err(err)?;
    let () = conn
        .set(lock_key(string), "not a lock")
        .await
        .map_err(err)?;
    let hash_before: Vec<(String, String)> = conn.hgetall(lock_key(hash)).await.map_err(err)?;
    for name in [hash, string] {
        for kind in Kind::BOTH {
            match kind.acquire(&client, name, Duration::from_secs(10)).await {
                Err(e)
                    if matches!(&e, Error::Incompatible { key } if key == name)
                        && e.to_string().contains("d2") => {}
                other => {
                    return Err(format!(
                        "{} acquire of {name}: expected Incompatible, got {:?}",
                        kind.as_str(),
                        other.map(|g| g.token())
                    ))
                }
            }
            let fence: bool = conn.exists(fence_key(name)).await.map_err(err)?;
            if fence {
                return Err(format!(
                    "{} acquire of {name} created a fence key",
                    kind.as_str()
                ));
            }
        }
    }
    let hash_after: Vec<(String, String)> = conn.hgetall(lock_key(hash)).await.map_err(err)?;
    let string_after: Option<String> = conn.get(lock_key(string)).await.map_err(err)?;
    let mut result = Ok(());
    if hash_after != hash_before {
        result = Err(format!(
            "the hash changed: {hash_before:?} -> {hash_after:?}"
        ));
    } else if string_after.as_deref() != Some("not a lock") {
        result = Err(format!("the string changed: {string_after:?}"));
    }
    let () = conn
        .del(&[lock_key(hash), lock_key(string)])
        .await
        .map_err(err)?;
    result
}

/// Runs the release script as the runtime sends it (compare the value and delete) and returns
/// its status code: 0 released, -1 another owner holds it, -2 no lock, -3 not a `d2` lock.
async fn release_code(
    conn: &mut MultiplexedConnection,
    name: &str,
    value: &str,
) -> Result<i64, String> {
    let (id, code): (String, i64) = redis::cmd("EVAL")
        .arg(distlock::scripts::RELEASE)
        .arg(2)
        .arg(lock_key(name))
        .arg(format!("{}:released", lock_key(name)))
        .arg(value)
        .arg("test-release")
        .arg(0)
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    if id != "test-release" {
        return Err(format!("the release echoed {id:?}"));
    }
    Ok(code)
}

/// Runs the renew script for one lock as the runtime sends it and returns its status: 1 ours
/// (extended), 0 gone, -1 another owner's, -2 not a `d2` lock.
async fn renew_status(
    conn: &mut MultiplexedConnection,
    name: &str,
    value: &str,
    ttl: Duration,
) -> Result<i64, String> {
    let (id, statuses): (String, Vec<i64>) = redis::cmd("EVAL")
        .arg(distlock::scripts::RENEW)
        .arg(1)
        .arg(lock_key(name))
        .arg("test-renew")
        .arg(ttl.as_millis() as u64)
        .arg(value)
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    match (id.as_str(), statuses.as_slice()) {
        ("test-renew", [status]) => Ok(*status),
        _ => Err(format!("unexpected renew reply {id:?} {statuses:?}")),
    }
}

/// In `d2` a re-entry writes nothing to Redis and its release changes nothing there (holds are
/// counted on the client), and the release script retried with the same value (after a lost
/// reply) frees the lock once, then finds no lock and changes nothing, not even a lock someone
/// else took meanwhile. (Formerly: the inner hold field's release, sent twice, left the outer
/// hold field in the lock hash.)
async fn retried_release(client: Client, mut conn: MultiplexedConnection) -> Result<(), String> {
    let name = "twice";
    let inner_client = client.clone();
    let mut inner_conn = conn.clone();
    client
        .lock(name)
        .ttl(Duration::from_secs(10))
        .fenced(true)
        .run(async move {
            let before = lock_state(&mut inner_conn, name).await;
            if before.value.is_none() || before.fence.is_none() {
                return Err(format!("the outer hold is not in Redis: {before:?}"));
            }
            let inner = inner_client
                .lock(name)
                .fenced(true)
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            if !inner.is_reentry() {
                return Err("the nested acquire did not re-enter".to_owned());
            }
            if inner.token().is_none() || inner.token() != distlock::fencing_token() {
                return Err(format!(
                    "the re-entry's token {:?} is not the outer hold's {:?}",
                    inner.token(),
                    distlock::fencing_token()
                ));
            }
            let entered = lock_state(&mut inner_conn, name).await;
            if entered != before {
                return Err(format!("the re-entry changed the lock in Redis: {before:?} -> {entered:?}"));
            }
            // The inner hold lets go on the client only: Redis still holds the outer lock as
            // it was. (There is no inner hold in Redis to release twice; the retried release
            // script is checked on a lock of its own below.)
            inner.release().await.map_err(|e| e.to_string())?;
            let released = lock_state(&mut inner_conn, name).await;
            if released != before {
                return Err(format!("the inner hold's release changed the lock (the outer hold still holds it): {before:?} -> {released:?}"));
            }
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())??;
    // `run` sent the release without waiting for it: another connection sees it once the
    // client's confirmation is in (the client at rest).
    testkit::at_rest(&[&client], Duration::from_secs(10)).await;
    if lock_value(&mut conn, name).await.is_some() {
        return Err("not released after the outer body".to_owned());
    }

    // The release script sent twice with the same value (a retry after a lost reply).
    let raw = "twice-raw";
    let guard = acquire_for(&client, raw, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let value = lock_value(&mut conn, raw)
        .await
        .ok_or("no lock key after the acquire")?;
    for (attempt, expected) in [(1, 0), (2, -2)] {
        let code = release_code(&mut conn, raw, &value).await?;
        if code != expected {
            return Err(format!(
                "release attempt {attempt} returned {code}, expected {expected}"
            ));
        }
        if lock_value(&mut conn, raw).await.is_some() {
            return Err(format!("still held after release attempt {attempt}"));
        }
    }
    // The guard's own release then finds no lock: refused, nothing changed.
    match guard.release().await {
        Err(Error::NotOwner { .. }) => {}
        other => {
            return Err(format!(
                "the guard's release after its lock was freed returned {other:?}, expected NotOwner"
            ))
        }
    }
    // A retry that comes after someone else took the lock does not free theirs.
    let next = acquire_for(&client, raw, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let theirs = lock_value(&mut conn, raw).await;
    let code = release_code(&mut conn, raw, &value).await?;
    if code != -1 || lock_value(&mut conn, raw).await != theirs {
        return Err(format!(
            "a late retried release returned {code} (expected -1) against the next holder's lock"
        ));
    }
    next.release().await.map_err(|e| e.to_string())
}

/// Releases and renewals by non-owners (another client's value, another acquisition of the same
/// client, an empty value, a value that is not `d2`) are refused and change nothing: the lock's
/// value, its fence key, and its expiry (never extended).
async fn foreign_release(client: Client, mut conn: MultiplexedConnection) -> Result<(), String> {
    let name = "foreign";
    let guard = acquire_fenced(&client, name, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let before = lock_state(&mut conn, name).await;
    let value = before
        .value
        .clone()
        .ok_or("no lock key after the acquire")?;
    // The same client's value with another counter: another acquisition of the same owner.
    let sibling = format!("{value}0");
    let intruders = ["d2:intruder:1", sibling.as_str(), "", "intruder"];
    for owner in intruders {
        let code = release_code(&mut conn, name, owner).await?;
        if code != -1 {
            return Err(format!(
                "release by owner {owner:?} returned {code}, expected -1 (not the owner)"
            ));
        }
    }
    let pttl_before: i64 = conn.pttl(lock_key(name)).await.map_err(|e| e.to_string())?;
    for owner in intruders {
        let status = renew_status(&mut conn, name, owner, Duration::from_secs(3600)).await?;
        if status != -1 {
            return Err(format!(
                "renewal by owner {owner:?} returned {status}, expected -1 (not the owner)"
            ));
        }
    }
    let pttl_after: i64 = conn.pttl(lock_key(name)).await.map_err(|e| e.to_string())?;
    if pttl_after > pttl_before {
        return Err(format!(
            "a foreign renewal extended the lease: PTTL {pttl_before} -> {pttl_after}"
        ));
    }
    let after = lock_state(&mut conn, name).await;
    if after != before {
        return Err(format!("the lock changed: {before:?} -> {after:?}"));
    }
    guard.release().await.map_err(|e| e.to_string())
}
