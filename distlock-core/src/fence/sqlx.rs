//! Fenced writes in PostgreSQL through sqlx: [`advance`] the resource's fence inside your
//! transaction, first, then write; a stale holder's transaction fails before any of its writes
//! can commit.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use distlock_core::fence::sqlx::{advance, SCHEMA};
//!
//! sqlx::raw_sql(SCHEMA).execute(&pool).await?; // once, at startup (or run the migration)
//!
//! let ttl = Duration::from_secs(10);
//! let guard = distlock_core::lock("order:42").ttl(ttl).fenced(true).acquire().await?;
//! let fence = guard.fence().expect("taken with fenced(true)");
//! let mut tx = pool.begin().await?;
//! // First: Err(Fenced) if a newer holder has written. Frozen here for longer than the ttl,
//! // this transaction is ended by Postgres, and the next holder goes on.
//! advance(&mut tx, &fence, ttl).await?;
//! sqlx::query("UPDATE orders SET state = 'settled' WHERE id = 42").execute(&mut *tx).await?;
//! tx.commit().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! The table ([`SCHEMA`], also the migration file `migrations/20261127000000_distlock_fences.sql`
//! of the `distlock-core` package, for `sqlx migrate` and other migration tools) holds one row
//! per resource: the highest token that has written it and that token's lock name. [`advance`]
//! is one `INSERT … ON CONFLICT DO UPDATE … WHERE` that moves the row forward only:
//!
//! * **The same token passes again**: a body that writes in several transactions, and a
//!   re-entered body (which shares its outer hold's token), advance with one token many times.
//! * **A stale token fails** with [`Error::Fenced`], and the transaction is made to fail too
//!   (an error is raised in it), so none of its writes can commit even if the error is
//!   ignored: Postgres turns its `COMMIT` into a rollback.
//! * **Racing holders never interleave.** The upsert locks the row until the transaction ends:
//!   a newer holder's `advance` waits for an older holder's transaction to commit or roll back,
//!   then reads the row again; an older holder's `advance` behind a newer one's waits, then is
//!   refused. Call `advance` **before** the transaction reads what it will write: every read
//!   after it sees each older holder's committed writes.
//! * **Another lock's row is a misuse**: [`Error::FenceMismatch`], nothing compared.
//! * **A frozen holder blocks the next for at most the bound.** `advance` sets
//!   `idle_in_transaction_session_timeout` to its `bound` and `lock_timeout` to twice it for
//!   the rest of the transaction (`SET LOCAL`, in the upsert itself, before it waits on the
//!   row; both are off by default in Postgres). A holder paused after `advance` for longer
//!   than `bound` has its session ended by Postgres, which releases the row: its writes roll
//!   back and its `COMMIT` fails, and the next holder, waiting on the row, goes on. A holder
//!   that is not idle but still running a statement is not ended: the next holder's `advance`
//!   waits twice its `bound`, then fails with [`Error::FenceLocked`], its transaction failed,
//!   to retry. The wait is twice the bound so that a holder frozen idle, ended after the same
//!   bound, always lets go first, even when the next holder arrived just after it froze and
//!   Postgres takes a moment to end it. Give every holder of a resource the same bound: the
//!   lock's ttl, after which the lock has moved on anyway.
//! * **Outside a transaction nothing is fenced**, so `advance` refuses it:
//!   [`Error::FenceOutsideTransaction`]. A transaction sqlx began (`pool.begin()`,
//!   `conn.begin()`) is known at no cost; on a connection sqlx has none on, `advance` asks the
//!   server first (one `LOCK TABLE distlock_fences IN ACCESS SHARE MODE`, which only a
//!   transaction block accepts), so a `BEGIN` you issued yourself counts.
//!
//! **Isolation.** Use `READ COMMITTED` (Postgres' default): after waiting on the row the
//! upsert compares against the row as the other transaction committed it. Under
//! `REPEATABLE READ` or `SERIALIZABLE` a row changed by a concurrent holder fails the later
//! transaction with a serialization failure (`40001`, an [`Error::Store`]) instead of waiting:
//! still safe, but it must be retried, and a retry with the same token is then refused if it
//! is stale. Run `advance` in the transaction that makes the writes, not in a savepoint
//! (a nested `begin`) that may be rolled back on its own.
//!
//! [`advance`] fences the resource named like the lock (the lock `order:42` protects the
//! resource `order:42`: every table its holders write); [`advance_resource`] names the
//! resource apart, when one lock protects several resources with fences of their own.

use std::time::Duration;

use ::sqlx::postgres::PgConnection;
use ::sqlx::{Connection, Executor, Row};

use crate::error::Error;
use crate::fence::Fence;

/// The fence table's DDL: idempotent (`CREATE TABLE IF NOT EXISTS distlock_fences`), the same
/// SQL as the migration file `migrations/20261127000000_distlock_fences.sql`.
pub const SCHEMA: &str = include_str!("../../migrations/20261127000000_distlock_fences.sql");

/// The longest bound Postgres takes (`lock_timeout`, twice the bound, is `int` milliseconds):
/// about 12.4 days.
pub const LONGEST_BOUND: Duration = Duration::from_millis(i32::MAX as u64 / 2);

/// Moves the fence of the resource named like `fence`'s lock to its token, in the transaction
/// `conn` (`&mut tx`), bounding how long a frozen holder can block the next. See
/// [`advance_resource`].
pub async fn advance(conn: &mut PgConnection, fence: &Fence, bound: Duration) -> Result<(), Error> {
    advance_resource(conn, fence.name(), fence, bound).await
}

/// Moves the fence of `resource` to `fence`'s token, in the transaction `conn` (`&mut tx`):
/// call it first in the transaction, before its reads and writes.
///
/// `bound` (the lock's ttl is the natural choice; at least 1 ms, at most [`LONGEST_BOUND`])
/// is how long this transaction may sit idle from now on before Postgres ends its session
/// (`idle_in_transaction_session_timeout`: a holder frozen after `advance` lets go of the row
/// then); this `advance`, and every later statement of the transaction, waits at most twice
/// the bound for a lock (`lock_timeout`). Both are `SET LOCAL`: they end with the transaction.
/// Give every holder of a resource the same bound.
///
/// `Ok` when no higher token of the lock has advanced `resource` (the same token passes
/// again); the row stays locked until the transaction ends. Fails with [`Error::Fenced`] when
/// a higher token has (the transaction is then failed too: none of its writes commit),
/// [`Error::FenceMismatch`] when `resource` is fenced by another lock,
/// [`Error::FenceLocked`] when another holder's transaction kept the row locked for twice the
/// bound (this transaction has failed: retry), [`Error::FenceOutsideTransaction`] when `conn`
/// is not in a transaction (nothing done), [`Error::InvalidConfig`] for a bound out of range,
/// [`Error::FenceTableMissing`] when the table was never created (run [`SCHEMA`] first), and
/// [`Error::Store`] on another database error.
pub async fn advance_resource(
    conn: &mut PgConnection,
    resource: &str,
    fence: &Fence,
    bound: Duration,
) -> Result<(), Error> {
    let bound_ms = bound.as_millis();
    if bound_ms == 0 || bound > LONGEST_BOUND {
        return Err(Error::InvalidConfig {
            reason: format!("the bound of `advance` ({bound:?}) must be 1 ms to {LONGEST_BOUND:?} (Postgres' `lock_timeout`, twice the bound, is `int` milliseconds, and 0 turns the timeouts off): give the lock's ttl"),
        });
    }
    let store = |source: ::sqlx::Error| match code(&source).as_deref() {
        Some(OUTSIDE_TRANSACTION) => Error::FenceOutsideTransaction {
            resource: resource.to_owned(),
        },
        Some(UNDEFINED_TABLE) => Error::FenceTableMissing {
            resource: resource.to_owned(),
        },
        Some(LOCK_NOT_AVAILABLE) => Error::FenceLocked {
            resource: resource.to_owned(),
            waited: bound * 2,
        },
        _ => Error::Store {
            resource: resource.to_owned(),
            source: Box::new(source),
        },
    };
    // A transaction sqlx began is known here for free; a connection sqlx did not begin one on
    // may still be in a `BEGIN` of the user's own: `LOCK TABLE` (a lock the upsert takes
    // anyway, in a weaker mode) fails outside a transaction block, and only there.
    if !conn.is_in_transaction() {
        conn.execute(IN_TRANSACTION).await.map_err(store)?;
    }
    // Each statement through `Executor`'s boxed futures on the connection itself: `Query`'s
    // own `fetch_*` futures, generic over the executor, make this future's `Send` depend on
    // a higher-ranked `Executor` bound the compiler cannot prove, and callers spawn it (axum,
    // `tokio::spawn`).
    let advance = ::sqlx::query(ADVANCE)
        .bind(resource)
        .bind(fence.name())
        .bind(fence.token().to_string())
        .bind(bound_ms.to_string())
        .bind((bound_ms * 2).to_string());
    let moved = conn.fetch_optional(advance).await.map_err(store)?;
    if moved.is_some() {
        return Ok(());
    }
    // Refused: the row (locked by the upsert) holds a higher token, or another lock's.
    let seen = ::sqlx::query(SEEN).bind(resource);
    let row = conn.fetch_one(seen).await.map_err(store)?;
    let (fenced_by, seen): (String, String) = (
        row.try_get(0).map_err(store)?,
        row.try_get(1).map_err(store)?,
    );
    // Fail the transaction, so that its writes cannot commit even if the error is ignored.
    let _failed = conn.execute(FAIL_TRANSACTION).await;
    if fenced_by != fence.name() {
        return Err(Error::FenceMismatch {
            resource: resource.to_owned(),
            lock: fence.name().to_owned(),
            fenced_by: Some(fenced_by),
        });
    }
    Err(Error::Fenced {
        resource: resource.to_owned(),
        token: fence.token(),
        seen: seen.parse().unwrap_or(u64::MAX),
    })
}

/// The SQLSTATE of a database error.
fn code(error: &::sqlx::Error) -> Option<String> {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned())
}

/// `no_active_sql_transaction`: `LOCK TABLE` outside a transaction block.
const OUTSIDE_TRANSACTION: &str = "25P01";

/// `lock_not_available`: a lock waited for longer than `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// SQLSTATE `undefined_table`: `distlock_fences` was never created ([`SCHEMA`]).
const UNDEFINED_TABLE: &str = "42P01";

/// Fails with `25P01` outside a transaction block; in one, takes the weakest table lock (the
/// upsert takes a stronger one next), which conflicts only with `ALTER`/`DROP`-like locks.
const IN_TRANSACTION: &str = "LOCK TABLE distlock_fences IN ACCESS SHARE MODE";

/// The upsert: a row per resource, moved forward only, within one lock name. Returns a row
/// when it inserted or moved (or kept) the token. Its source row sets the bounds (`$4`, idle,
/// and `$5`, lock waits, in ms) for the rest of the transaction first, so the wait on another
/// holder's row is bounded (`set_config` is volatile: evaluated once, before the row is
/// inserted or its conflict waited on; the `WHERE` reads both results, so neither is planned
/// away).
const ADVANCE: &str = "INSERT INTO distlock_fences AS f (resource, lock_name, token) \
     SELECT $1, $2, $3::numeric \
     FROM (SELECT set_config('lock_timeout', $5, true) AS waits, \
                  set_config('idle_in_transaction_session_timeout', $4, true) AS idles) AS bound \
     WHERE bound.waits IS NOT NULL AND bound.idles IS NOT NULL \
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() \
     WHERE f.lock_name = EXCLUDED.lock_name AND f.token <= EXCLUDED.token \
     RETURNING 1";

/// What refused the upsert.
const SEEN: &str = "SELECT lock_name, token::text FROM distlock_fences WHERE resource = $1";

/// An error raised in the transaction: Postgres fails every later statement of it and turns
/// its `COMMIT` into a rollback.
const FAIL_TRANSACTION: &str = "DO $$ BEGIN RAISE EXCEPTION 'distlock: a fenced write was refused \
     (stale fencing token, or another lock''s resource): this transaction cannot commit'; END $$";
