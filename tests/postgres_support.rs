//! testkit's PostgreSQL server (`testkit::PostgresServer`): a real `postgres` started from an
//! empty data directory answers SQL on its loopback port, two started at once get ports of their
//! own, and a dropped one leaves neither a process nor its data directory behind. The suite has
//! no SQL client crate: the queries go through the `psql` CLI, which comes with the server
//! (`scripts/ensure-postgres.sh` installs both).

use std::process::{Command, Stdio};

use testkit::PostgresServer;

/// What `psql` prints for `sql` on `server`: tuples only, unaligned (`1` for `SELECT 1`).
/// Panics with psql's message when it fails.
fn query(server: &PostgresServer, sql: &str) -> String {
    let out = Command::new(PostgresServer::binary("psql"))
        .arg(server.url())
        // No ~/.psqlrc: only the query's rows are printed.
        .args(["-X", "-tAc", sql])
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null())
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {} -c {sql:?}: {}",
        server.url(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("psql prints UTF-8")
        .trim()
        .to_owned()
}

/// Whether `pid` is a live process: `kill -0` finds it and it is not a zombie (the postmaster
/// is an orphan, and a container's PID 1 may never reap it: exited, it holds nothing but its
/// process-table entry).
fn running(pid: u32) -> bool {
    let found = Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .expect("run kill")
        .success();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    found && state != Some("Z")
}

#[test]
fn a_started_server_answers_sql() {
    let server = PostgresServer::start();
    assert_eq!(query(&server, "SELECT 1"), "1");
    assert_eq!(
        server.url(),
        format!("postgres://postgres@127.0.0.1:{}/postgres", server.port())
    );
    assert!(
        running(server.pid()),
        "postmaster {} is not running",
        server.pid()
    );
}

#[test]
fn two_servers_at_once_get_ports_of_their_own() {
    let (a, b) = (PostgresServer::start(), PostgresServer::start());
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    assert_ne!(a.data_dir(), b.data_dir());
    for server in [&a, &b] {
        assert_eq!(query(server, "SELECT 1"), "1");
        assert_eq!(query(server, "SHOW port"), server.port().to_string());
    }
    // Each has its own data: a table made on one is not on the other.
    query(&a, "CREATE TABLE only_on_a (id int)");
    assert_eq!(
        query(
            &a,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_on_a'"
        ),
        "1"
    );
    assert_eq!(
        query(
            &b,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_on_a'"
        ),
        "0"
    );
}

#[test]
fn a_dropped_server_leaves_no_process_and_no_data_directory() {
    let server = PostgresServer::start();
    let (pid, dir) = (server.pid(), server.data_dir().to_path_buf());
    assert!(running(pid), "postmaster {pid} is not running");
    assert!(
        dir.join("PG_VERSION").is_file(),
        "no data directory at {}",
        dir.display()
    );
    drop(server);
    assert!(!running(pid), "postmaster {pid} still runs after the drop");
    assert!(
        !dir.exists(),
        "{} is still there after the drop",
        dir.display()
    );
}
