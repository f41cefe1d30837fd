//! Scenario 10: bad input. Every case must give a typed error with a clear message (or work,
//! for names that are merely unusual), none may panic, and none may touch another lock: a
//! sentinel lock held by another client is compared before and after.
//!
//! 10a runs in this process: names (very long, Unicode, control and RESP-looking bytes,
//! `{`/`}`/`:`/`<`, empty), invalid URLs, wrong or missing passwords, invalid settings, and at
//! the Redis level a retried release of the same hold and releases by a non-owner.
//! 10b runs in a worker process, because the client registry is process-global: a lock before
//! `init`, `init` twice, named clients that do not exist, and `#[distributed_lock]` keys built
//! from hostile values.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock::{distributed_lock, Client, Config, Error};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::{RedisServer, ServerOptions};
use tokio::time::Instant;

use super::mutex::SectionError;
use crate::common::{calm_client, lock_fields, lock_hashes, lock_key, lock_state, Settings};
use crate::report::{Scenario, Tally};
use crate::worker::{Ctx, Worker};

pub(crate) fn scenario(_: &Settings, budget: Duration) -> Scenario {
    Scenario::new(
        "10a",
        "bad input: names, URLs, passwords, settings, double/foreign release",
        budget,
        run,
    )
}

pub(crate) fn registry(_: &Settings, budget: Duration) -> Scenario {
    Scenario::new(
        "10b",
        "bad input (worker process): lock before init, init twice, unknown client, hostile key values",
        budget,
        run_registry,
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

/// An unusual but valid name works end to end: the lock hash is exactly `distlock:{name}`.
async fn round_trip(
    client: &Client,
    conn: &mut MultiplexedConnection,
    name: &str,
) -> Result<(), String> {
    let guard = client
        .lock(name)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .map_err(|e| e.to_string())?;
    let fields = lock_fields(conn, name).await;
    if fields != 3 {
        return Err(format!("{fields} fields under the exact key"));
    }
    guard.release().await.map_err(|e| e.to_string())?;
    if lock_fields(conn, name).await != 0 {
        return Err("still held after release".to_owned());
    }
    Ok(())
}

async fn run(t: Arc<Tally>) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let client = calm_client(&server.url()).await;
    let sentinel_client = calm_client(&server.url()).await;
    let sentinel = sentinel_client
        .lock("sentinel")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("sentinel");
    let sentinel_before = lock_state(&mut conn, "sentinel").await;

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
        let (client, mut conn) = (client.clone(), conn.clone());
        case(&t, what, async move {
            round_trip(&client, &mut conn, &name).await
        })
        .await;
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
        let (client, mut conn) = (client.clone(), conn.clone());
        case(&t, "a, a: and a:b are distinct locks", async move {
            let a = client
                .lock("a")
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            for other in ["a:", "a:b", "A", "a "] {
                round_trip(&client, &mut conn, other)
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
                    if !matches!(e, Error::Redis { .. })
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
    {
        let (client, mut conn) = (client.clone(), conn.clone());
        case(&t, "release retried with the same hold", async move {
            retried_release(&client, &mut conn).await
        })
        .await;
    }
    {
        let (client, mut conn) = (client.clone(), conn.clone());
        case(&t, "release by a non-owner", async move {
            foreign_release(&client, &mut conn).await
        })
        .await;
    }

    // The sentinel is untouched and nothing else is left.
    let sentinel_after = lock_state(&mut conn, "sentinel").await;
    t.check(sentinel_after == sentinel_before, || {
        format!("the sentinel lock changed: {sentinel_before:?} -> {sentinel_after:?}")
    });
    t.check(sentinel.ensure_held().is_ok(), || {
        "the sentinel was lost".to_owned()
    });
    let left = lock_hashes(&mut conn).await;
    t.check(left == [lock_key("sentinel")], || {
        format!("lock keys left: {left:?}")
    });
    let released = sentinel.release().await;
    t.check(released.is_ok(), || {
        format!("sentinel release: {released:?}")
    });
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

async fn retried_release(client: &Client, conn: &mut MultiplexedConnection) -> Result<(), String> {
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
    if lock_fields(conn, name).await != 0 {
        return Err("not released after the outer body".to_owned());
    }
    Ok(())
}

async fn foreign_release(client: &Client, conn: &mut MultiplexedConnection) -> Result<(), String> {
    let name = "foreign";
    let guard = client
        .lock(name)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .map_err(|e| e.to_string())?;
    let before = lock_state(conn, name).await;
    let (_, holds) = owner_and_holds(conn, name).await;
    let hold = holds.iter().next().cloned().ok_or("no hold field")?;
    for (owner, hold) in [
        ("intruder:1", hold.as_str()),
        ("intruder:1", "h999999"),
        ("", hold.as_str()),
    ] {
        let left = release_code(conn, name, owner, hold).await?;
        if left != -1 {
            return Err(format!(
                "release by owner {owner:?} returned {left}, expected -1 (not the owner)"
            ));
        }
    }
    if lock_state(conn, name).await != before {
        return Err("the lock hash changed".to_owned());
    }
    guard.release().await.map_err(|e| e.to_string())
}

async fn run_registry(t: Arc<Tally>) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let sentinel_client = calm_client(&server.url()).await;
    let sentinel = sentinel_client
        .lock("sentinel")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .expect("sentinel");
    let before = lock_state(&mut conn, "sentinel").await;
    let mut worker = Worker::spawn("registry", "registry", &[("url", server.url())]);
    loop {
        let Some(line) = worker.next_line(Duration::from_secs(30)).await else {
            t.violation(format!(
                "the registry worker stopped answering; stderr: {}",
                worker.stderr_tail()
            ));
            break;
        };
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("CASE"), Some(_), Some("ok"), _) => t.ops(1),
            (Some("CASE"), Some(name), _, detail) => {
                t.ops(1);
                t.violation(format!("{name}: {}", detail.unwrap_or("")));
            }
            (Some("DONE"), ..) => break,
            _ => {}
        }
    }
    let code = worker.finish(Duration::from_secs(10)).await;
    t.check(code == Some(0), || {
        format!(
            "the registry worker exited with {code:?}: {}",
            worker.stderr_tail()
        )
    });
    t.check(lock_state(&mut conn, "sentinel").await == before, || {
        "the sentinel lock changed".to_owned()
    });
    let left = lock_hashes(&mut conn).await;
    t.check(left == [lock_key("sentinel")], || {
        format!("lock keys left: {left:?}")
    });
    let released = sentinel.release().await;
    t.check(released.is_ok(), || {
        format!("sentinel release: {released:?}")
    });
}

/// Returns the lock keys held while its body runs (exactly its own).
#[distributed_lock(key = "value:<value>", ttl = "5s")]
async fn locked_value(
    value: &str,
    mut conn: MultiplexedConnection,
) -> Result<Vec<String>, SectionError> {
    let keys: Vec<String> = conn.keys("distlock:{value:*}").await?;
    Ok(keys)
}

#[distributed_lock(key = "pair:<a>:<b>", ttl = "5s")]
async fn locked_pair(
    a: &str,
    b: &str,
    mut conn: MultiplexedConnection,
) -> Result<Vec<String>, SectionError> {
    let keys: Vec<String> = conn.keys("distlock:{pair:*}").await?;
    Ok(keys)
}

#[distributed_lock(key = "named:<id>", client = "missing")]
async fn locked_by_missing_client(id: u32) -> Result<(), SectionError> {
    Ok(())
}

/// Worker role `registry`: says `CASE <name> ok` or `CASE <name> FAIL <detail>` per case.
pub(crate) async fn registry_worker(ctx: Ctx) -> Result<(), String> {
    let url = ctx.param("url").to_owned();
    let report = |name: &str, result: Result<(), String>| match result {
        Ok(()) => ctx.say(format!("CASE {name} ok")),
        Err(detail) => ctx.say(format!("CASE {name} FAIL {}", detail.replace('\n', " "))),
    };
    let conn = redis::Client::open(url.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;

    // Before init.
    report(
        "lock-before-init",
        match distlock::lock("x").acquire().await {
            Err(e @ Error::NotInitialized) if e.to_string().contains("init") => Ok(()),
            other => Err(format!("{:?}", other.map(|g| g.token()))),
        },
    );
    report(
        "annotated-before-init",
        match locked_value("x", conn.clone()).await {
            Err(SectionError::Lock(Error::NotInitialized)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    report(
        "named-client-before-init",
        match distlock::lock("x").client("nope").acquire().await {
            Err(Error::UnknownClient { name }) if name == "nope" => Ok(()),
            Err(Error::NotInitialized) => Ok(()),
            other => Err(format!("{:?}", other.map(|g| g.token()))),
        },
    );

    // init, twice.
    report(
        "init",
        distlock::init(url.as_str())
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
    );
    report(
        "init-twice",
        match distlock::init(url.as_str()).await {
            Err(e @ Error::AlreadyInitialized { client: None })
                if e.to_string().contains("once") =>
            {
                Ok(())
            }
            other => Err(format!("{:?}", other.map(drop))),
        },
    );
    report("install-as-twice", {
        let first = Config::new(url.as_str())
            .install_as("second")
            .await
            .map(drop);
        match (first, Config::new(url.as_str()).install_as("second").await) {
            (Ok(()), Err(Error::AlreadyInitialized { client: Some(n) })) if n == "second" => Ok(()),
            (first, second) => Err(format!("{first:?} / {:?}", second.map(drop))),
        }
    });
    report(
        "unknown-client",
        match distlock::lock("x").client("missing").acquire().await {
            Err(e @ Error::UnknownClient { .. })
                if e.to_string().contains("install_as(\"missing\")") =>
            {
                Ok(())
            }
            other => Err(format!("{:?}", other.map(|g| g.token()))),
        },
    );
    report(
        "annotated-unknown-client",
        match locked_by_missing_client(1).await {
            Err(SectionError::Lock(Error::UnknownClient { name })) if name == "missing" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    report(
        "default-client-still-works",
        async {
            let g = distlock::lock("after-errors")
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            g.release().await.map_err(|e| e.to_string())
        }
        .await,
    );

    // Hostile values in a key template: each maps to its own lock, braces never leak into the
    // hash tag, and values too long for a key are refused with a typed error.
    let values = [
        "",
        "{",
        "}",
        "{}",
        "%7B",
        "%",
        "a:b",
        "<id>",
        "ünï🔒",
        "\r\n$4\r\nPING\r\n",
        "\u{0}",
        "sentinel}",
    ];
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for value in values {
        match locked_value(value, conn.clone()).await {
            Ok(keys) if keys.len() == 1 => {
                let key = &keys[0];
                let tag = key
                    .strip_prefix("distlock:{")
                    .and_then(|k| k.strip_suffix('}'));
                match tag {
                    Some(tag) if !tag.contains(['{', '}']) => {}
                    _ => problems.push(format!("{value:?} -> key {key:?} breaks the hash tag")),
                }
                if !seen.insert(key.clone()) {
                    problems.push(format!(
                        "{value:?} -> key {key:?} collides with another value"
                    ));
                }
            }
            other => problems.push(format!("{value:?}: {other:?}")),
        }
    }
    report(
        "hostile-values",
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        },
    );
    let pairs = [("1:2", "3"), ("1", "2:3"), ("1:", "2"), ("1", ":2")];
    let mut keys = BTreeSet::new();
    let mut problems = Vec::new();
    for (a, b) in pairs {
        match locked_pair(a, b, conn.clone()).await {
            Ok(held) if held.len() == 1 => {
                if !keys.insert(held[0].clone()) {
                    problems.push(format!("({a:?}, {b:?}) -> {:?} collides", held[0]));
                }
            }
            other => problems.push(format!("({a:?}, {b:?}): {other:?}")),
        }
    }
    report(
        "placeholder-injectivity",
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        },
    );
    let long = "z".repeat(distlock::MAX_NAME_LEN + 1);
    report(
        "over-long-value",
        match locked_value(&long, conn.clone()).await {
            Err(SectionError::Lock(e @ Error::InvalidKey { .. })) if e.to_string().len() < 400 => {
                Ok(())
            }
            other => Err(format!("{:?}", other.map_err(|e| e.to_string()))),
        },
    );
    ctx.say("DONE");
    Ok(())
}
