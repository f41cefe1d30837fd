//! Fenced writes in PostgreSQL through sqlx: [`advance`] the resource's fence inside your
//! transaction, first, then write; a stale holder's transaction fails before any of its writes
//! can commit.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use distlock_core::fence::sqlx::{advance, SCHEMA};
//!
//! sqlx::raw_sql(SCHEMA).execute(&pool).await?; // once, at startup (or run the migration)
//!
//! let guard = distlock_core::lock("order:42").fenced(true).acquire().await?;
//! let fence = guard.fence().expect("taken with fenced(true)");
//! let mut tx = pool.begin().await?;
//! advance(&mut *tx, &fence).await?; // first: Err(Fenced) if a newer holder has written
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

use ::sqlx::postgres::PgConnection;
use ::sqlx::{Executor, Row};

use crate::error::Error;
use crate::fence::Fence;

/// The fence table's DDL: idempotent (`CREATE TABLE IF NOT EXISTS distlock_fences`), the same
/// SQL as the migration file `migrations/20261127000000_distlock_fences.sql`.
pub const SCHEMA: &str = include_str!("../../migrations/20261127000000_distlock_fences.sql");

/// Moves the fence of the resource named like `fence`'s lock to its token, in the transaction
/// `conn` (`&mut *tx`). See [`advance_resource`].
pub async fn advance(conn: &mut PgConnection, fence: &Fence) -> Result<(), Error> {
    advance_resource(conn, fence.name(), fence).await
}

/// Moves the fence of `resource` to `fence`'s token, in the transaction `conn` (`&mut *tx`):
/// call it first in the transaction, before its reads and writes.
///
/// `Ok` when no higher token of the lock has advanced `resource` (the same token passes
/// again); the row stays locked until the transaction ends. Fails with [`Error::Fenced`] when a
/// higher token has (the transaction is then failed too: none of its writes commit),
/// [`Error::FenceMismatch`] when `resource` is fenced by another lock, and [`Error::Store`]
/// on a database error (a missing table: run [`SCHEMA`] first).
pub async fn advance_resource(
    conn: &mut PgConnection,
    resource: &str,
    fence: &Fence,
) -> Result<(), Error> {
    let store = |source: ::sqlx::Error| Error::Store {
        resource: resource.to_owned(),
        source: Box::new(source),
    };
    // Each statement through `Executor`'s boxed futures on the connection itself: `Query`'s
    // own `fetch_*` futures, generic over the executor, make this future's `Send` depend on
    // a higher-ranked `Executor` bound the compiler cannot prove, and callers spawn it (axum,
    // `tokio::spawn`).
    let advance = ::sqlx::query(ADVANCE)
        .bind(resource)
        .bind(fence.name())
        .bind(fence.token().to_string());
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

/// The upsert: a row per resource, moved forward only, within one lock name. Returns a row
/// when it inserted or moved (or kept) the token.
const ADVANCE: &str = "INSERT INTO distlock_fences AS f (resource, lock_name, token) \
     VALUES ($1, $2, $3::numeric) \
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now() \
     WHERE f.lock_name = EXCLUDED.lock_name AND f.token <= EXCLUDED.token \
     RETURNING 1";

/// What refused the upsert.
const SEEN: &str = "SELECT lock_name, token::text FROM distlock_fences WHERE resource = $1";

/// An error raised in the transaction: Postgres fails every later statement of it and turns
/// its `COMMIT` into a rollback.
const FAIL_TRANSACTION: &str = "DO $$ BEGIN RAISE EXCEPTION 'distlock: a fenced write was refused \
     (stale fencing token, or another lock''s resource): this transaction cannot commit'; END $$";
