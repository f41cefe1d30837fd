//! Scenario 10b: bad input to the client registry, in a worker process because the registry
//! is process-global: a lock before `init`, `init` twice, named clients that do not exist, and
//! `#[distributed_lock]` keys built from hostile values. As in 10a, every case must give a
//! typed error with a clear message and none may touch the sentinel lock.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use distlock::{distributed_lock, Config, Error};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use testkit::RedisServer;

use super::bad_input::Sentinel;
use super::mutex::SectionError;
use crate::common::{redis_conn, Settings};
use crate::report::{Scenario, Tally};
use crate::worker::{Ctx, Worker};

pub(crate) fn scenario(_: &Settings, budget: Duration) -> Scenario {
    Scenario::new(
        "10b",
        "bad input (worker process): lock before init, init twice, unknown client, hostile key values",
        budget,
        run,
    )
}

async fn run(t: Arc<Tally>) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let sentinel = Sentinel::take(&server, &mut conn).await;
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
    sentinel.check_and_release(&t, &mut conn).await;
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

/// `Ok` without problems, else all of them in one message.
fn none_of(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Worker role `registry`: says `CASE <name> ok` or `CASE <name> FAIL <detail>` per case.
pub(crate) async fn worker(ctx: Ctx) -> Result<(), String> {
    let url = ctx.param("url").to_owned();
    let report = |name: &str, result: Result<(), String>| match result {
        Ok(()) => ctx.say(format!("CASE {name} ok")),
        Err(detail) => ctx.say(format!("CASE {name} FAIL {}", detail.replace('\n', " "))),
    };
    let conn = redis_conn(&url).await?;

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
    let mut client = None;
    report(
        "init",
        distlock::init(url.as_str())
            .await
            .map(|c| client = Some(c))
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
    report("hostile-values", none_of(problems));
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
    report("placeholder-injectivity", none_of(problems));
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
    // The last locked calls' releases were sent, not waited for: they reach Redis before
    // this process exits.
    if let Some(client) = &client {
        client.settle().await;
    }
    ctx.say("DONE");
    Ok(())
}
