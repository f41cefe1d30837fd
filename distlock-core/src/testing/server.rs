//! [`TestRedis`]: a throwaway `redis-server` on a free loopback port, and what a test asks it
//! from outside the code under test.

use std::net::TcpListener;

use redis::aio::MultiplexedConnection;

use crate::config::Config;
use crate::testing::process::{failed, Supervised};
use crate::wire::keys::LockKeys;

/// A `redis-server` on `127.0.0.1:<port>` for tests, stopped when dropped (or when the test
/// process exits), and the faults a test gives the code under test: see the
/// [module docs](crate::testing).
pub struct TestRedis {
    process: Supervised,
    port: u16,
    url: String,
    /// A node of a [`TestCluster`](crate::testing::TestCluster): every node's URL, what its
    /// clients are configured with.
    cluster: Option<Vec<String>>,
}

impl std::fmt::Debug for TestRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRedis")
            .field("url", &self.url)
            .field("pid", &self.process.pid())
            .finish()
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
        Self::start_with(&[])
    }

    /// [`TestRedis::start`] with more `redis-server` arguments (a replica's `--replicaof`).
    /// A port another process took between choosing it and the server binding it is given up
    /// for another one.
    pub(crate) fn start_with(extra: &[String]) -> std::io::Result<TestRedis> {
        let mut last = None;
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let mut args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
            ]
            .map(str::to_owned)
            .into();
            args.extend_from_slice(extra);
            match Supervised::start(&args, "Ready to accept connections") {
                Ok(process) => {
                    return Ok(TestRedis {
                        process,
                        port,
                        url: format!("redis://127.0.0.1:{port}/"),
                        cluster: None,
                    })
                }
                // Not found, or not ready in time: another port will not help.
                Err(e) if !e.to_string().contains("gave up") => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| failed("redis-server did not start".to_owned())))
    }

    /// The server's URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `redis-server` process's id (what [`TestRedis::pause`] signals).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// A configuration for this server (the defaults of [`Config::new`]), to connect or install
    /// a client of your own; for a node of a [`TestCluster`](crate::testing::TestCluster), the
    /// whole cluster's ([`Config::cluster`]).
    pub fn config(&self) -> Config {
        match &self.cluster {
            Some(nodes) => Config::cluster(nodes.clone()),
            None => Config::new(self.url.clone()),
        }
    }

    /// This server as a node of a cluster of `nodes` (their URLs).
    pub(crate) fn set_cluster(&mut self, nodes: Vec<String>) {
        self.cluster = Some(nodes);
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
    /// [`Config::key_prefix`] (also `redis.key_prefix(prefix).is_locked(name)`).
    ///
    /// # Panics
    ///
    /// As [`TestRedis::is_locked`].
    pub async fn is_locked_under(&self, prefix: &str, name: &str) -> bool {
        if let Ok(client) = crate::registry::get(None) {
            client.settle().await;
        }
        let key = lock_key(prefix, name);
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut self.connection().await)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: EXISTS {key}: {e}"));
        exists
    }

    /// How many waiters are queued in Redis for the lock (or semaphore) `name` under the default
    /// key prefix, of every client: what a test waits for before it makes a fault that concerns
    /// them (a [`Crashable`](crate::testing::Crashable) client crashed with its waiters queued).
    /// A client's waiters of one lock that wait in the client behind one of them queue
    /// themselves within a second.
    ///
    /// # Panics
    ///
    /// If the server cannot be asked, or `name` is not a valid lock name.
    pub async fn queued(&self, name: &str) -> usize {
        let key = format!("{}:queue", lock_key("distlock", name));
        redis::cmd("ZCARD")
            .arg(&key)
            .query_async(&mut self.connection().await)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: ZCARD {key}: {e}"))
    }

    /// A connection of its own to this server, for the kit's commands.
    pub(crate) async fn connection(&self) -> MultiplexedConnection {
        let client = redis::Client::open(self.url.as_str())
            .unwrap_or_else(|e| panic!("distlock::testing: {e}"));
        client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: cannot connect to {}: {e}", self.url))
    }

    /// The server's run id (`INFO server`): how the server checks of every client tell this
    /// server from others (`deploy::check_faults`).
    pub(crate) async fn run_id(&self) -> String {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.connection().await)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: INFO server on {}: {e}", self.url));
        info.lines()
            .find_map(|line| line.strip_prefix("run_id:"))
            .map(|id| id.trim().to_owned())
            .unwrap_or_else(|| panic!("distlock::testing: {} reports no run_id", self.url))
    }

    /// Sends `signal` to the server process.
    pub(crate) fn signal(&self, signal: &str) -> std::io::Result<()> {
        self.process.signal(signal)
    }
}

/// The key of the lock `name` under `prefix`.
///
/// # Panics
///
/// If `prefix` or `name` is not valid (a test helper: the message says why).
pub(crate) fn lock_key(prefix: &str, name: &str) -> String {
    LockKeys::new(prefix, name)
        .unwrap_or_else(|e| panic!("distlock::testing: {e}"))
        .lock()
        .to_owned()
}
