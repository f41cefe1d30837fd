//! Fenced writes in PostgreSQL (`distlock::fence::sqlx`, feature `sqlx-postgres`) against a real
//! `postgres` started by the testkit: `advance` moves a resource's row forward only, the same
//! token passes again, a stale token fails with `Fenced` and its transaction cannot commit even
//! if the error is ignored, a newer holder racing an older one waits on the row (and an older
//! one behind a newer one waits, then is refused), another lock's resource is a misuse, and the
//! schema is idempotent and the same as the migration file.

use std::time::Duration;

use distlock::fence::sqlx::{advance, advance_resource, SCHEMA};
use distlock::{Error, Fence};
use sqlx::{Connection, PgConnection, PgPool, Row};
use testkit::PostgresServer;

/// Every holder's bound: far above these tests' transactions, so it never ends one here
/// (tests/fence_sqlx_bounds.rs tests the bound itself).
const BOUND: Duration = Duration::from_secs(30);

async fn pool(server: &PostgresServer) -> PgPool {
    let pool = PgPool::connect(&server.url()).await.expect("connect");
    sqlx::raw_sql(SCHEMA).execute(&pool).await.unwrap();
    sqlx::raw_sql(SCHEMA)
        .execute(&pool)
        .await
        .expect("idempotent");
    sqlx::raw_sql("CREATE TABLE notes (id INT PRIMARY KEY, body TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::raw_sql("INSERT INTO notes VALUES (1, 'empty')")
        .execute(&pool)
        .await
        .unwrap();
    pool
}

async fn body(pool: &PgPool) -> String {
    sqlx::query("SELECT body FROM notes WHERE id = 1")
        .fetch_one(pool)
        .await
        .unwrap()
        .get(0)
}

/// A fenced write of `text` in one transaction, committed.
async fn write(pool: &PgPool, fence: &Fence, text: &str) -> Result<(), Error> {
    let mut tx = pool.begin().await.unwrap();
    advance(&mut tx, fence, BOUND).await?;
    sqlx::query("UPDATE notes SET body = $1 WHERE id = 1")
        .bind(text)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    Ok(())
}

#[tokio::test]
async fn a_stale_token_fails_and_its_transaction_cannot_commit() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    let (old, new) = (Fence::new("note:1", 100), Fence::new("note:1", 200));
    write(&pool, &old, "old").await.unwrap();
    write(&pool, &old, "old again").await.unwrap();
    write(&pool, &new, "new").await.unwrap();
    write(&pool, &new, "new again").await.unwrap();

    // The stale holder wrote first in its transaction, then advanced: refused.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("UPDATE notes SET body = 'stale' WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    match advance(&mut tx, &old, BOUND).await {
        Err(Error::Fenced {
            resource,
            token,
            seen,
        }) => assert_eq!((resource.as_str(), token, seen), ("note:1", 100, 200)),
        other => panic!("a stale advance: {other:?}"),
    }
    // Ignoring the error does not let the write through: the transaction has failed.
    let _ = tx.commit().await;
    assert_eq!(body(&pool).await, "new again");
    let row = sqlx::query("SELECT lock_name, token::text FROM distlock_fences")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        (row.get::<String, _>(0), row.get::<String, _>(1)),
        ("note:1".to_owned(), "200".to_owned())
    );
}

#[tokio::test]
async fn tokens_are_kept_exactly_as_u64() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    write(&pool, &Fence::new("n", u64::MAX - 1), "a")
        .await
        .unwrap();
    write(&pool, &Fence::new("n", u64::MAX), "b").await.unwrap();
    match write(&pool, &Fence::new("n", u64::MAX - 1), "c").await {
        Err(Error::Fenced { seen, .. }) => assert_eq!(seen, u64::MAX),
        other => panic!("{other:?}"),
    }
    assert_eq!(body(&pool).await, "b");
}

/// A token sequence restarted lower is refused; the documented operator step (deleting the
/// resource's fence row) moves the store forward.
#[tokio::test]
async fn a_sequence_restarted_lower_is_refused_until_the_operator_moves_it() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    write(&pool, &Fence::new("note:1", 5_000), "before")
        .await
        .unwrap();
    let lower = Fence::new("note:1", 1_000);
    assert!(write(&pool, &lower, "after").await.unwrap_err().is_fenced());
    sqlx::query("DELETE FROM distlock_fences WHERE resource = 'note:1'")
        .execute(&pool)
        .await
        .unwrap();
    write(&pool, &lower, "after").await.unwrap();
    assert_eq!(body(&pool).await, "after");
}

#[tokio::test]
async fn another_locks_resource_is_a_misuse() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    let mut tx = pool.begin().await.unwrap();
    advance_resource(&mut tx, "notes", &Fence::new("a", 5), BOUND)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    match advance_resource(&mut tx, "notes", &Fence::new("b", 9), BOUND).await {
        Err(Error::FenceMismatch {
            resource,
            lock,
            fenced_by,
        }) => assert_eq!(
            (resource.as_str(), lock.as_str(), fenced_by.as_deref()),
            ("notes", "b", Some("a"))
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn without_the_table_the_error_says_so() {
    let server = PostgresServer::start();
    let mut conn = PgConnection::connect(&server.url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let err = advance(&mut tx, &Fence::new("x", 1), BOUND)
        .await
        .unwrap_err();
    // Names the table and the fix (issue 44: it named the relation only).
    assert!(matches!(err, Error::FenceTableMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("distlock_fences"), "{err}");
    assert!(err.to_string().contains("fence::sqlx::SCHEMA"), "{err}");
}

/// Waits until one session of the server waits on a row lock (`what` names the wait).
async fn one_waits_on_a_lock(pool: &PgPool, what: &str) {
    testkit::eventually(Duration::from_secs(5), what, || async move {
        let waiting: i64 =
            sqlx::query("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
                .fetch_one(pool)
                .await
                .unwrap()
                .get(0);
        (waiting == 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn racing_holders_wait_on_the_row_and_never_interleave() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    let (old, new) = (Fence::new("note:1", 10), Fence::new("note:1", 20));

    // The older holder advanced first and is still in its transaction: the newer one waits
    // for it, then writes after it.
    let mut older = pool.begin().await.unwrap();
    advance(&mut older, &old, BOUND).await.unwrap();
    let newer = tokio::spawn({
        let pool = pool.clone();
        let new = new.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            advance(&mut tx, &new, BOUND).await.unwrap();
            let seen: String = sqlx::query("SELECT body FROM notes WHERE id = 1")
                .fetch_one(&mut *tx)
                .await
                .unwrap()
                .get(0);
            sqlx::query("UPDATE notes SET body = $1 WHERE id = 1")
                .bind(format!("{seen} + new"))
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
    });
    // The newer holder is blocked on the row while the older transaction is open.
    one_waits_on_a_lock(&pool, "the newer advance waits").await;
    assert!(!newer.is_finished());
    sqlx::query("UPDATE notes SET body = 'old' WHERE id = 1")
        .execute(&mut *older)
        .await
        .unwrap();
    older.commit().await.unwrap();
    newer.await.unwrap();
    assert_eq!(
        body(&pool).await,
        "old + new",
        "the newer holder read the older's write"
    );

    // The other way round: an older holder behind a newer one waits, then is refused.
    let newest = Fence::new("note:1", 30);
    let mut ahead = pool.begin().await.unwrap();
    advance(&mut ahead, &newest, BOUND).await.unwrap();
    let behind = tokio::spawn({
        let pool = pool.clone();
        async move { write(&pool, &new, "stale").await }
    });
    one_waits_on_a_lock(&pool, "the older advance waits").await;
    sqlx::query("UPDATE notes SET body = 'newest' WHERE id = 1")
        .execute(&mut *ahead)
        .await
        .unwrap();
    ahead.commit().await.unwrap();
    let refused = behind.await.unwrap().unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    assert_eq!(body(&pool).await, "newest");
}

#[test]
fn the_schema_is_the_migration_file() {
    let file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/distlock-core/migrations/20261127000000_distlock_fences.sql"
    ))
    .unwrap();
    assert_eq!(file, SCHEMA);
    assert!(SCHEMA.contains("CREATE TABLE IF NOT EXISTS distlock_fences"));
}
