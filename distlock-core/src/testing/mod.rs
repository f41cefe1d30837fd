//! Testing code that takes distributed locks (feature `testing`): a throwaway `redis-server`
//! for the test process, with the default client installed on it.
//!
//! ```no_run
//! # use distlock_core as distlock;
//! #[tokio::test]
//! async fn settles_once() {
//!     let redis = distlock::testing::init().await; // the first test starts the server
//!     // ... call the code under test, which takes its locks through the default client
//!     assert!(!redis.is_locked("order:42").await);
//! }
//! ```
//!
//! The first call of [`init`] starts the server and installs the client. Every
//! `#[tokio::test]` function may call it, and they share the server (give each test its own
//! lock names, as tests run in parallel). The client outlives the runtime of the test that
//! installed it (each `#[tokio::test]` has its own), so later tests use it as it is.
//! [`TestRedis::start`] starts a private server, stopped when dropped, for a test that needs one
//! of its own (install a named client on it with `redis.config().install_as("name")`).
//!
//! Servers listen on a free loopback port, keep nothing on disk (`--save ""`, no AOF) and stop
//! when their test process exits, however it exits: each runs under a small `sh` that kills it
//! when the test process's end of a pipe closes. It needs `redis-server` on the `PATH` (or its
//! path in `REDIS_SERVER`) and a Unix `sh`.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::config::Config;
use crate::wire::keys::LockKeys;

/// How long a server may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// Runs `redis-server` with the arguments after `$1` (the binary) and kills it when standard
/// input closes: the test process holds the other end of that pipe until it exits.
const SUPERVISOR: &str = r#"bin="$1"; shift
command -v "$bin" >/dev/null 2>&1 || { echo "distlock-testing: $bin not found"; exit 127; }
"$bin" "$@" &
server=$!
read -r _ || true
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
"#;

/// A `redis-server` on `127.0.0.1:<port>` for tests, stopped when dropped (or when the test
/// process exits).
pub struct TestRedis {
    supervisor: Child,
    /// Closing this (dropping it) stops the server.
    stdin: Option<ChildStdin>,
    port: u16,
    url: String,
}

impl std::fmt::Debug for TestRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRedis").field("url", &self.url).finish()
    }
}

impl TestRedis {
    /// Starts a server on a free loopback port and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// When `redis-server` (or `sh`) cannot be run, or the server is not ready within 10 s;
    /// the message says which.
    pub fn start() -> std::io::Result<TestRedis> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let port_arg = port.to_string();
        let mut supervisor = Command::new("sh")
            .args(["-c", SUPERVISOR, "sh", &binary, "--port", &port_arg])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args([
                "--logfile",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed(format!("cannot run `sh` to start redis-server: {e}")))?;
        let stdin = supervisor.stdin.take();
        let server = TestRedis {
            supervisor,
            stdin,
            port,
            url: format!("redis://127.0.0.1:{port}/"),
        };
        server.wait_ready(&binary)
    }

    /// Reads the server's log until it says it is ready (and keeps draining it afterwards).
    fn wait_ready(mut self, binary: &str) -> std::io::Result<TestRedis> {
        let Some(stdout) = self.supervisor.stdout.take() else {
            return Err(failed("redis-server's output is not piped".to_owned()));
        };
        let (ready, is_ready) = mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(ready);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let outcome = if line.contains("Ready to accept connections") {
                    Ok(())
                } else if line.starts_with("distlock-testing:") {
                    Err(line)
                } else {
                    continue;
                };
                if let Some(ready) = ready.take() {
                    let _ = ready.send(outcome);
                }
            }
        });
        match is_ready.recv_timeout(READY_WITHIN) {
            Ok(Ok(())) => Ok(self),
            Ok(Err(line)) => Err(failed(format!(
                "{}; install redis-server (e.g. `apt-get install redis-server`) or set REDIS_SERVER to its path",
                line.trim_start_matches("distlock-testing: ")
            ))),
            Err(_) => Err(failed(format!(
                "{binary} on port {} did not become ready within {READY_WITHIN:?}",
                self.port
            ))),
        }
    }

    /// The server's URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A configuration for this server (the defaults of [`Config::new`]), to connect or install
    /// a client of your own.
    pub fn config(&self) -> Config {
        Config::new(self.url.clone())
    }

    /// True if the lock `name` (under the default key prefix `distlock`) is held right now, by
    /// anyone: what a test asserts from outside the code under test. It first waits for the
    /// releases the default client has sent and not yet seen answered ([`crate::Client::settle`]):
    /// `run` and `#[distributed_lock]` return without waiting for their release, and a test
    /// that asks right after one returned must see the lock free.
    ///
    /// # Panics
    ///
    /// If the server cannot be asked (it is a test helper), or `name` is not a valid lock name.
    pub async fn is_locked(&self, name: &str) -> bool {
        self.is_locked_under("distlock", name).await
    }

    /// [`TestRedis::is_locked`] for clients configured with another
    /// [`Config::key_prefix`].
    ///
    /// # Panics
    ///
    /// As [`TestRedis::is_locked`].
    pub async fn is_locked_under(&self, prefix: &str, name: &str) -> bool {
        if let Ok(client) = crate::registry::get(None) {
            client.settle().await;
        }
        let keys = LockKeys::new(prefix, name).unwrap_or_else(|e| panic!("distlock::testing: {e}"));
        let client = redis::Client::open(self.url.as_str())
            .unwrap_or_else(|e| panic!("distlock::testing: {e}"));
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: cannot connect to {}: {e}", self.url));
        let exists: bool = redis::cmd("EXISTS")
            .arg(keys.lock())
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: EXISTS {}: {e}", keys.lock()));
        exists
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        // The supervisor kills the server when its standard input closes.
        drop(self.stdin.take());
        let _ = self.supervisor.wait();
    }
}

fn failed(message: String) -> std::io::Error {
    std::io::Error::other(format!("distlock::testing: {message}"))
}

static SHARED: OnceCell<TestRedis> = OnceCell::const_new();

/// The test process's shared server, started by the first call, with the default client
/// installed on it (what [`crate::init`] does): call it at the start of every test that takes
/// locks through the default client. Later calls, from any test and any runtime, return the
/// same server.
///
/// # Panics
///
/// If the server cannot be started (the message says why, e.g. that `redis-server` is not
/// installed), or a default client was installed already by other means.
pub async fn init() -> &'static TestRedis {
    SHARED
        .get_or_init(|| async {
            let server = TestRedis::start().unwrap_or_else(|e| panic!("{e}"));
            if let Err(e) = server.config().install().await {
                panic!("distlock::testing::init: {e}");
            }
            server
        })
        .await
}
