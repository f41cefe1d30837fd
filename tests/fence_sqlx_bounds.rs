//! The bounds of `distlock::fence::sqlx::advance` against a real `postgres` (testkit): it
//! refuses a connection outside a transaction with a typed error (and fences nothing), takes a
//! `BEGIN` the user issued by hand, and a holder frozen after `advance` blocks the next holder
//! no longer than the bound: Postgres ends the frozen transaction's session, the next holder
//! commits, and the frozen one's writes never land (the zombie row). A holder still running a
//! statement fails the next with `FenceLocked` after twice its bound instead. The bounds are
//! `SET LOCAL`: they end with the transaction. Not promised, and pinned: a `COMMIT` issued by hand inside a
//! transaction sqlx began is not seen.

use std::time::{Duration, Instant};

use distlock::fence::sqlx::{advance, LONGEST_BOUND, SCHEMA};
use distlock::{Error, Fence};
use sqlx::{Connection, Executor, PgConnection, PgPool, Row};
use testkit::PostgresServer;

async fn pool(server: &PostgresServer) -> PgPool {
    let pool = PgPool::connect(&server.url()).await.expect("connect");
    sqlx::raw_sql(SCHEMA).execute(&pool).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE notes (id INT PRIMARY KEY, body TEXT NOT NULL); \
         INSERT INTO notes VALUES (1, 'empty')",
    )
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

/// `lock_timeout` and `idle_in_transaction_session_timeout` as the session sees them.
async fn bounds(conn: &mut PgConnection) -> (String, String) {
    let query = sqlx::query(
        "SELECT current_setting('lock_timeout'), \
         current_setting('idle_in_transaction_session_timeout')",
    );
    let row = conn.fetch_one(query).await.unwrap();
    (row.get(0), row.get(1))
}

/// The fence rows, as `(resource, token)`.
async fn fences(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query("SELECT resource, token::text FROM distlock_fences ORDER BY resource")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// Waits until one session of the server waits on a lock.
async fn one_waits_on_a_lock(pool: &PgPool) {
    testkit::eventually(
        Duration::from_secs(5),
        "a session waits on a lock",
        || async {
            let waiting: i64 =
                sqlx::query("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
                    .fetch_one(pool)
                    .await
                    .unwrap()
                    .get(0);
            (waiting == 1).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn advance_outside_a_transaction_is_refused_and_fences_nothing() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    let bound = Duration::from_secs(5);
    let mut conn = PgConnection::connect(&server.url()).await.unwrap();
    match advance(&mut conn, &Fence::new("note:1", 7), bound).await {
        Err(Error::FenceOutsideTransaction { resource }) => assert_eq!(resource, "note:1"),
        other => panic!("advance in autocommit: {other:?}"),
    }
    assert!(fences(&pool).await.is_empty(), "nothing fenced");

    // A `BEGIN` of the user's own (sqlx does not know of it) is a transaction.
    conn.execute("BEGIN").await.unwrap();
    advance(&mut conn, &Fence::new("note:1", 7), bound)
        .await
        .unwrap();
    conn.execute("UPDATE notes SET body = 'by hand' WHERE id = 1")
        .await
        .unwrap();
    conn.execute("COMMIT").await.unwrap();
    assert_eq!(body(&pool).await, "by hand");
    assert_eq!(fences(&pool).await, [("note:1".to_owned(), "7".to_owned())]);
    // After the user's `COMMIT` the connection is outside again.
    let after = advance(&mut conn, &Fence::new("note:1", 8), bound).await;
    assert!(
        matches!(after, Err(Error::FenceOutsideTransaction { .. })),
        "{after:?}"
    );
    assert_eq!(fences(&pool).await, [("note:1".to_owned(), "7".to_owned())]);
}

/// The zombie row: holder A advances, writes, and freezes in its transaction (its connection
/// left idle, as a process stopped by a pause). Holder B, with the next token, waits on the
/// row only until Postgres ends A's session at the bound, then commits; A's `COMMIT` fails and
/// its write never lands.
#[tokio::test]
async fn a_frozen_holder_is_ended_at_the_bound_and_the_next_holder_commits() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    let bound = Duration::from_secs(1);

    let mut frozen = pool.begin().await.unwrap();
    advance(&mut frozen, &Fence::new("note:1", 10), bound)
        .await
        .unwrap();
    sqlx::query("UPDATE notes SET body = 'zombie' WHERE id = 1")
        .execute(&mut *frozen)
        .await
        .unwrap();
    // A is frozen from here: its transaction sits idle, holding the fence row.

    let next = tokio::spawn({
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let started = Instant::now();
            advance(&mut tx, &Fence::new("note:1", 20), bound).await?;
            let waited = started.elapsed();
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
            Ok::<_, Error>(waited)
        }
    });
    one_waits_on_a_lock(&pool).await;
    let waited = tokio::time::timeout(bound * 5, next)
        .await
        .expect("the next holder is not blocked for ever")
        .unwrap()
        .expect("the next holder advances once the frozen one is ended");
    // The frozen holder was ended `bound` after it froze, before the next holder's own wait
    // (twice the bound) ran out.
    assert!(
        waited < bound * 2,
        "the next holder waited {waited:?}, with a {bound:?} bound"
    );
    assert_eq!(
        body(&pool).await,
        "empty + new",
        "B read the row as it was before the frozen holder's write"
    );

    // A thaws: its session was ended, its commit fails, its write never lands.
    let thawed = frozen.commit().await;
    assert!(thawed.is_err(), "the frozen holder's commit: {thawed:?}");
    assert_eq!(body(&pool).await, "empty + new");
    assert_eq!(
        fences(&pool).await,
        [("note:1".to_owned(), "20".to_owned())]
    );
}

/// A holder still running a statement (not idle, so not ended) keeps the row: the next holder
/// is told after twice its bound with `FenceLocked`, and its transaction has failed.
#[tokio::test]
async fn a_holder_busy_past_the_bound_fails_the_next_with_fence_locked() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;

    let mut busy = pool.begin().await.unwrap();
    advance(
        &mut busy,
        &Fence::new("note:1", 10),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let running = tokio::spawn(async move {
        sqlx::query("SELECT pg_sleep(4)")
            .execute(&mut *busy)
            .await
            .unwrap();
        busy.rollback().await.unwrap();
    });

    let bound = Duration::from_millis(300);
    let mut tx = pool.begin().await.unwrap();
    let started = Instant::now();
    match advance(&mut tx, &Fence::new("note:1", 20), bound).await {
        Err(Error::FenceLocked { resource, waited }) => {
            assert_eq!((resource.as_str(), waited), ("note:1", bound * 2));
        }
        other => panic!("advance behind a busy holder: {other:?}"),
    }
    let told_after = started.elapsed();
    assert!(
        told_after >= bound * 2 && told_after < Duration::from_secs(3),
        "told after {told_after:?}"
    );
    let failed = sqlx::query("UPDATE notes SET body = 'next' WHERE id = 1")
        .execute(&mut *tx)
        .await;
    assert!(failed.is_err(), "the transaction has failed: {failed:?}");
    drop(tx);
    running.await.unwrap();
    assert_eq!(body(&pool).await, "empty");
}

#[tokio::test]
async fn the_bound_holds_for_the_transaction_only_and_is_checked() {
    let server = PostgresServer::start();
    let _pool = pool(&server).await;
    let mut conn = PgConnection::connect(&server.url()).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    advance(&mut tx, &Fence::new("n", 1), Duration::from_millis(1234))
        .await
        .unwrap();
    assert_eq!(
        bounds(&mut tx).await,
        ("2468ms".to_owned(), "1234ms".to_owned())
    );
    tx.commit().await.unwrap();
    assert_eq!(bounds(&mut conn).await, ("0".to_owned(), "0".to_owned()));

    for bound in [
        Duration::ZERO,
        Duration::from_micros(999),
        LONGEST_BOUND + Duration::from_millis(1),
    ] {
        let mut tx = conn.begin().await.unwrap();
        let refused = advance(&mut tx, &Fence::new("n", 2), bound).await;
        assert!(
            matches!(refused, Err(Error::InvalidConfig { .. })),
            "{bound:?}: {refused:?}"
        );
    }
    let mut tx = conn.begin().await.unwrap();
    advance(&mut tx, &Fence::new("n", 2), LONGEST_BOUND)
        .await
        .unwrap();
}

/// Not promised, pinned: sqlx still counts a transaction whose `COMMIT` was issued by hand,
/// and `advance` then runs outside one (its row is committed at once).
#[tokio::test]
async fn a_commit_by_hand_inside_a_sqlx_transaction_is_not_seen() {
    let server = PostgresServer::start();
    let pool = pool(&server).await;
    let mut tx = pool.begin().await.unwrap();
    tx.execute("COMMIT").await.unwrap();
    advance(&mut tx, &Fence::new("note:1", 5), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(fences(&pool).await, [("note:1".to_owned(), "5".to_owned())]);
}
