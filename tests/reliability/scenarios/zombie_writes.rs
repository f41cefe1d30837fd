//! Scenario 23: fenced writes against zombies (issue 29). Holders frozen (`SIGSTOP`) past their
//! lease resume and write with their old token while newer holders write; the stores
//! (`distlock::fence::redis` on a separate redis-server, `distlock::fence::sqlx` on a real
//! `postgres`) must let none of the stale writes land.
//!
//! Worker processes take one lock again and again (`fenced`, ttl 400 ms, no renewal). Each
//! hold is a read-modify-write of a history (the tokens written so far, comma-separated) in
//! both stores, written twice per hold (the same token twice): it reads, checks its guard
//! (`ensure_held`: the holder believes it holds the lock), says `HOLD`, and writes when the
//! suite says `go`. Every third hold the suite freezes the holder before `go`, and resumes
//! it only after a newer holder has written (or 5 s): the zombie then writes from its old read
//! with its old token.
//!
//! A stale write *landed* when an acknowledged write is missing from the final history (a
//! lost update: a zombie overwrote it) or the history's tokens go back. Phases:
//!
//! * one server, fenced: 0 stale writes land in either store, and zombie writes are refused
//!   (`Error::Fenced`);
//! * one server, plain writes (the negative control, same run): stale writes land in both
//!   stores, which shows the check can see them;
//! * RedLock over 3 masters (tokens from a quorum), fenced: 0 land.
//!
//! In Postgres the fenced write is the documented one: `advance` first in the transaction,
//! then the read and the write; the plain one reads before the pause and writes after it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::fence::redis::FencedStore;
use distlock::fence::sqlx::{advance, SCHEMA};
use distlock::{Config, Error};
use redis::AsyncCommands;
use sqlx::{PgPool, Row};
use testkit::{PostgresServer, RedisServer};
use tokio::sync::watch;

use crate::common::{lock_unpoisoned, Settings};
use crate::report::{Scenario, Tally};
use crate::worker::{field_u64, fields, Ctx, Worker};

const TTL: Duration = Duration::from_millis(400);

/// How long a zombie stays frozen at most, waiting for a newer holder's write.
const FROZEN_AT_MOST: Duration = Duration::from_secs(5);

/// How long the Redis store keeps what refuses a stale fence: well past a zombie's freeze.
const FENCES_ARRIVE_WITHIN: Duration = Duration::from_secs(60);

/// The Redis key of a phase's history, written under the phase's lock: it carries the lock's
/// hash tag, as every key a `FencedStore` writes under a lock must (the plain control writes
/// the same key).
fn history_key(phase: &str) -> String {
    format!("history:{{{phase}}}")
}

pub(crate) fn scenario(s: &Settings, budget: Duration) -> Scenario {
    let (workers, rounds) = (s.pick(3, 5), s.pick(6, 24));
    Scenario::new(
        "23",
        format!(
            "fenced writes vs zombies: {workers} processes x {rounds} holds, every 3rd SIGSTOPped past its 400 ms lease, then writing with its old token (Redis + Postgres stores; one server, plain writes as the control, RedLock x3)"
        ),
        budget,
        move |t| run(t, workers, rounds),
    )
}

/// One phase's figures for one store.
#[derive(Default)]
struct Store {
    /// Acknowledged (landed) writes per token.
    landed: HashMap<u64, u64>,
    refused: u64,
}

#[derive(Default)]
struct Figures {
    redis: Store,
    pg: Store,
    zombies: u64,
}

async fn run(t: Arc<Tally>, workers: usize, rounds: u64) {
    let (locks, masters, data, pg) = tokio::task::spawn_blocking(|| {
        let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        (
            RedisServer::start(),
            masters,
            RedisServer::start(),
            PostgresServer::start(),
        )
    })
    .await
    .expect("start the servers");
    let pool = PgPool::connect(&pg.url()).await.expect("postgres");
    sqlx::raw_sql(SCHEMA).execute(&pool).await.expect("schema");
    sqlx::raw_sql("CREATE TABLE history (phase TEXT PRIMARY KEY, tokens TEXT NOT NULL)")
        .execute(&pool)
        .await
        .expect("history table");
    let redlock: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let phases = [
        ("one server, fenced", locks.url(), "fenced"),
        ("one server, plain (control)", locks.url(), "plain"),
        ("RedLock x3, fenced", redlock.join(","), "fenced"),
    ];
    let mut conn = data.conn().await;
    let mut store = FencedStore::new(conn.clone(), FENCES_ARRIVE_WITHIN);
    for (i, (name, lock_urls, mode)) in phases.into_iter().enumerate() {
        let phase = format!("zombie-{i}");
        sqlx::query("INSERT INTO history VALUES ($1, '')")
            .bind(&phase)
            .execute(&pool)
            .await
            .expect("history row");
        let params = [
            ("locks", lock_urls),
            ("data", data.url()),
            ("pg", pg.url()),
            ("phase", phase.clone()),
            ("mode", mode.to_owned()),
            ("rounds", rounds.to_string()),
        ];
        let figures = drive(&t, workers, &params).await;
        let key = history_key(&phase);
        let redis_history = match mode {
            "fenced" => store
                .get::<String>(&key)
                .await
                .expect("the fenced history")
                .map(|s| s.value),
            _ => conn.get(&key).await.expect("the plain history"),
        };
        let redis_history = parse(&redis_history.unwrap_or_default());
        let pg_history: String = sqlx::query("SELECT tokens FROM history WHERE phase = $1")
            .bind(&phase)
            .fetch_one(&pool)
            .await
            .expect("the postgres history")
            .get(0);
        let stale_redis = stale(&figures.redis, &redis_history);
        let stale_pg = stale(&figures.pg, &parse(&pg_history));
        t.ops(figures.redis.landed.values().sum::<u64>() + figures.pg.landed.values().sum::<u64>());
        t.faults(figures.zombies);
        t.note(format!(
            "{name}: {} zombies; stale writes landed: Redis {stale_redis}, Postgres {stale_pg}; zombie writes refused: Redis {}, Postgres {}",
            figures.zombies, figures.redis.refused, figures.pg.refused
        ));
        t.check(figures.zombies > 0, || {
            format!("{name}: no zombie was made")
        });
        if mode == "fenced" {
            t.check(stale_redis == 0 && stale_pg == 0, || {
                format!("{name}: stale writes landed: Redis {stale_redis}, Postgres {stale_pg}")
            });
            t.check(figures.redis.refused > 0 && figures.pg.refused > 0, || {
                format!("{name}: no zombie write was refused (Redis {}, Postgres {}): the zombies did not write stale", figures.redis.refused, figures.pg.refused)
            });
        } else {
            t.check(stale_redis > 0 && stale_pg > 0, || {
                format!("{name}: the control shows no stale write landing (Redis {stale_redis}, Postgres {stale_pg}): the check cannot see them")
            });
        }
    }
    drop((locks, masters, data, pg));
}

/// Spawns the workers of one phase and answers their holds, freezing every third holder
/// until a newer holder has written.
async fn drive(t: &Arc<Tally>, workers: usize, params: &[(&str, String)]) -> Figures {
    let figures = Arc::new(Mutex::new(Figures::default()));
    // The highest token written so far by anyone, in either store.
    let (written_tx, written) = watch::channel(0u64);
    let written_tx = Arc::new(written_tx);
    let holds = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut worker = Worker::spawn(format!("zombie-{w}"), "zombie", params);
        let (figures, written_tx, mut written, holds, t) = (
            figures.clone(),
            written_tx.clone(),
            written.clone(),
            holds.clone(),
            t.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(line) = worker.next_line(Duration::from_secs(30)).await else {
                    t.violation(format!(
                        "worker {} went quiet; stderr: {}",
                        worker.name(),
                        worker.stderr_tail()
                    ));
                    return;
                };
                if line.starts_with("HOLD") {
                    let token = field_u64(&line, "token");
                    if holds.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 3 == 2 {
                        worker.signal("STOP");
                        lock_unpoisoned(&figures).zombies += 1;
                        let newer = written.wait_for(|&w| w > token);
                        let _ = tokio::time::timeout(FROZEN_AT_MOST, newer).await;
                        worker.signal("CONT");
                    }
                    worker.send("go").await;
                } else if line.starts_with("WROTE") {
                    let f = fields(&line);
                    let token = field_u64(&line, "token");
                    let mut figures = lock_unpoisoned(&figures);
                    let store = match f.get("store") {
                        Some(&"redis") => &mut figures.redis,
                        _ => &mut figures.pg,
                    };
                    if f.get("landed") == Some(&"1") {
                        *store.landed.entry(token).or_default() += 1;
                        written_tx.send_modify(|w| *w = (*w).max(token));
                    } else {
                        store.refused += 1;
                    }
                } else if line.starts_with("ERR") {
                    t.violation(format!("worker {}: {line}", worker.name()));
                } else if line.starts_with("DONE") {
                    let _ = worker.finish(Duration::from_secs(10)).await;
                    return;
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a worker's driver");
    }
    Arc::try_unwrap(figures)
        .ok()
        .expect("the drivers are done")
        .into_inner()
        .expect("figures")
}

fn parse(text: &str) -> Vec<u64> {
    text.split(',').filter_map(|t| t.parse().ok()).collect()
}

/// Stale writes that landed: acknowledged writes missing from the final history (overwritten
/// by a zombie's write from an older read) plus the places where its tokens go back.
fn stale(store: &Store, history: &[u64]) -> u64 {
    let mut present: HashMap<u64, u64> = HashMap::new();
    for token in history {
        *present.entry(*token).or_default() += 1;
    }
    let lost: u64 = store
        .landed
        .iter()
        .map(|(token, n)| n.saturating_sub(present.get(token).copied().unwrap_or(0)))
        .sum();
    let back = history.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    lost + back
}

/// Worker role `zombie`: `rounds` holds of the phase's lock, each a read-modify-write of the
/// history in both stores, written twice, when the suite says `go`.
pub(crate) async fn worker(mut ctx: Ctx) -> Result<(), String> {
    let urls: Vec<String> = ctx.param("locks").split(',').map(str::to_owned).collect();
    let config = match urls.len() {
        1 => Config::new(urls[0].clone()),
        _ => Config::redlock(urls),
    };
    let client = config
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut data = redis::Client::open(ctx.param("data"))
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut store = FencedStore::new(data.clone(), FENCES_ARRIVE_WITHIN);
    let pool = PgPool::connect(ctx.param("pg"))
        .await
        .map_err(|e| e.to_string())?;
    let phase = ctx.param("phase").to_owned();
    let key = history_key(&phase);
    let fenced_mode = ctx.param("mode") == "fenced";
    for _ in 0..ctx.num("rounds") {
        let guard = client
            .lock(phase.clone())
            .ttl(TTL)
            .fenced(true)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        let fence = guard.fence().ok_or("a fenced lock without a fence")?;
        let token = fence.token();
        // The reads a zombie writes from after its pause.
        let redis_read = match fenced_mode {
            true => store
                .get::<String>(&key)
                .await
                .map_err(|e| e.to_string())?
                .map(|s| s.value)
                .unwrap_or_default(),
            false => data
                .get::<_, Option<String>>(&key)
                .await
                .map_err(|e| e.to_string())?
                .unwrap_or_default(),
        };
        let pg_read: String = sqlx::query("SELECT tokens FROM history WHERE phase = $1")
            .bind(&phase)
            .fetch_one(&pool)
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        guard.ensure_held().map_err(|e| e.to_string())?;
        ctx.say(format!("HOLD token={token}"));
        let _go = ctx.command().await;
        // Redis: two writes with one token, from the read.
        let mut value = redis_read;
        for _ in 0..2 {
            value = format!("{value},{token}");
            let landed = match fenced_mode {
                true => match store.set(&key, &value, &fence).await {
                    Ok(()) => true,
                    Err(Error::Fenced { .. }) => false,
                    Err(e) => {
                        ctx.say(format!("ERR redis write: {e}"));
                        false
                    }
                },
                false => data.set::<_, _, ()>(&key, &value).await.is_ok(),
            };
            ctx.say(format!(
                "WROTE store=redis token={token} landed={}",
                u8::from(landed)
            ));
        }
        // Postgres: two transactions with one token.
        let mut value = pg_read;
        for _ in 0..2 {
            let landed =
                match pg_write(&pool, &phase, fenced_mode.then_some(&fence), &value, token).await {
                    Ok(written) => {
                        value = written;
                        true
                    }
                    Err(Error::Fenced { .. }) => false,
                    Err(e) => {
                        ctx.say(format!("ERR postgres write: {e}"));
                        false
                    }
                };
            ctx.say(format!(
                "WROTE store=pg token={token} landed={}",
                u8::from(landed)
            ));
        }
        // A zombie's release is refused (its lock is gone): that is expected here.
        let _ = guard.release().await;
    }
    ctx.say("DONE");
    Ok(())
}

/// One Postgres write of the history: fenced, `advance` first, then read and append; plain,
/// append to `read` (the read made before the pause). Returns the history written.
async fn pg_write(
    pool: &PgPool,
    phase: &str,
    fence: Option<&distlock::Fence>,
    read: &str,
    token: u64,
) -> Result<String, Error> {
    let store = |e: sqlx::Error| Error::Store {
        resource: phase.to_owned(),
        source: Box::new(e),
    };
    let mut tx = pool.begin().await.map_err(store)?;
    let read = match fence {
        Some(fence) => {
            advance(&mut tx, fence, TTL).await?;
            let row = sqlx::query("SELECT tokens FROM history WHERE phase = $1")
                .bind(phase)
                .fetch_one(&mut *tx)
                .await
                .map_err(store)?;
            row.get::<String, _>(0)
        }
        None => read.to_owned(),
    };
    let value = format!("{read},{token}");
    sqlx::query("UPDATE history SET tokens = $2 WHERE phase = $1")
        .bind(phase)
        .bind(&value)
        .execute(&mut *tx)
        .await
        .map_err(store)?;
    tx.commit().await.map_err(store)?;
    Ok(value)
}
