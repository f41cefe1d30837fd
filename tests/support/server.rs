//! One throwaway `redis-server` process on a free loopback port: start (plain, TLS, with
//! options), signal, freeze, kill and restart, stopped by PID when dropped.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a server may take to say it is ready.
pub(crate) const READY_WITHIN: Duration = Duration::from_secs(10);

/// A `redis-server` child process on `127.0.0.1:<port>`.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    extra: Vec<String>,
    password: Option<String>,
    tls: bool,
    env: Vec<(String, String)>,
}

/// The PEM files of a TLS server (see `ServerOptions::tls`).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The server's certificate.
    pub cert: std::path::PathBuf,
    /// The server's private key.
    pub key: std::path::PathBuf,
    /// The CA that clients' certificates must be signed by.
    pub ca: std::path::PathBuf,
    /// `--tls-auth-clients yes`: clients must present a certificate (mutual TLS).
    pub auth_clients: bool,
}

/// Options for [`RedisServer::start_with`].
#[derive(Default, Clone)]
pub struct ServerOptions {
    /// `--requirepass`.
    pub password: Option<String>,
    /// `--cluster-enabled yes` (a one-node cluster, for `CLUSTER KEYSLOT`).
    pub cluster: bool,
    /// Use this port instead of a free one.
    pub port: Option<u16>,
    /// Serve TLS only (`--tls-port`, no plain port): [`RedisServer::url`] is `rediss://`.
    pub tls: Option<TlsFiles>,
    /// More `redis-server` arguments (e.g. `--replicaof 127.0.0.1 <port>`).
    pub args: Vec<String>,
    /// Environment variables of the server process (e.g. `LD_PRELOAD`, see `ShiftedClock`).
    pub env: Vec<(String, String)>,
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

pub(crate) fn redis_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

impl RedisServer {
    /// Starts a plain server on a free port.
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::default())
    }

    /// Adds ACL user `name` with password `password` and `rules` (after `on`, e.g. `~*`,
    /// `&*`, `+@all`, `-hset`) and returns a URL that logs in as it.
    pub async fn acl_user(&self, name: &str, password: &str, rules: &[&str]) -> String {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(name)
            .arg("on")
            .arg(format!(">{password}"))
            .arg(rules)
            .exec_async(&mut self.conn().await)
            .await
            .expect("ACL SETUSER");
        format!("redis://{name}:{password}@127.0.0.1:{}/", self.port)
    }

    /// Starts a TLS-only server with these files (see `Pki::files`, feature `tls`).
    pub fn start_tls(files: TlsFiles) -> RedisServer {
        Self::start_with(ServerOptions {
            tls: Some(files),
            ..Default::default()
        })
    }

    /// Starts a server with options. On a free port (no `port` given), a port taken by another
    /// process between choosing it and the server binding it is given up for another one.
    pub fn start_with(opts: ServerOptions) -> RedisServer {
        for _ in 0..3 {
            let port = opts.port.unwrap_or_else(free_port);
            if let Some(server) = Self::try_start(opts.clone(), port) {
                return server;
            }
            if opts.port.is_some() {
                break;
            }
        }
        panic!("redis-server did not become ready (three free ports tried)");
    }

    /// Starts a server with options on `port`; `None` if it did not become ready.
    fn try_start(opts: ServerOptions, port: u16) -> Option<RedisServer> {
        let mut extra = Vec::new();
        if let Some(pass) = &opts.password {
            extra.extend(["--requirepass".to_owned(), pass.clone()]);
        }
        if let Some(tls) = &opts.tls {
            let path = |p: &std::path::Path| p.display().to_string();
            extra.extend([
                "--tls-port".to_owned(),
                port.to_string(),
                "--tls-cert-file".to_owned(),
                path(&tls.cert),
                "--tls-key-file".to_owned(),
                path(&tls.key),
                "--tls-ca-cert-file".to_owned(),
                path(&tls.ca),
                "--tls-auth-clients".to_owned(),
                if tls.auth_clients { "yes" } else { "no" }.to_owned(),
            ]);
        }
        extra.extend(opts.args.iter().cloned());
        if opts.cluster {
            let dir = std::env::temp_dir().join(format!("distlock-cluster-{port}"));
            std::fs::create_dir_all(&dir).expect("temp dir");
            // A node file left by an earlier server on this port would make a stale node.
            let _ = std::fs::remove_file(dir.join("nodes.conf"));
            extra.extend([
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                dir.join("nodes.conf").display().to_string(),
            ]);
        }
        let mut server = RedisServer {
            child: None,
            port,
            extra,
            password: opts.password,
            tls: opts.tls.is_some(),
            env: opts.env,
        };
        server.spawn().then_some(server)
    }

    /// The server's working directory (emptied of snapshots before each start).
    fn data_dir(&self) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("distlock-redis-{}", self.port));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let _ = std::fs::remove_file(dir.join("dump.rdb"));
        dir
    }

    /// Starts the process and waits until it is ready; false if it is not (its port taken, say).
    fn spawn(&mut self) -> bool {
        // A TLS server listens on its TLS port only.
        let plain_port = if self.tls { 0 } else { self.port };
        let mut child = Command::new(redis_binary())
            .args(["--port", &plain_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            // A replica writes the snapshot its master sends it to its working directory, and
            // every server loads a snapshot it finds there: one empty folder per port.
            .args(["--dir", &self.data_dir().display().to_string()])
            // A master sends its first replica the snapshot at once, not after 5 s.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); run scripts/test.sh, which installs it")
            });
        // The server's own log line is the readiness signal.
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("Ready to accept connections") {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        if rx.recv_timeout(READY_WITHIN).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("redis-server on port {} did not become ready", self.port);
            return false;
        }
        self.child = Some(child);
        true
    }

    /// True until the server was killed ([`RedisServer::kill`]; a frozen one is running).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// `redis://127.0.0.1:<port>/` (with the password, if any; `rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        match &self.password {
            Some(pass) => format!("{scheme}://:{pass}@127.0.0.1:{}/", self.port),
            None => format!("{scheme}://127.0.0.1:{}/", self.port),
        }
    }

    /// A plain redis-rs client for assertions.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("valid url")
    }

    /// A multiplexed connection for assertions.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to test redis")
    }

    /// Sends `sig` (`-STOP`, `-CONT`, `-KILL`, ...) to the server by PID.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} failed");
    }

    /// Freezes the server (`SIGSTOP`): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Freezes the server (`SIGSTOP`) until the returned guard is dropped (`SIGCONT`), so a
    /// failing test never leaves a stopped `redis-server` behind; [`Paused::resume`] thaws it
    /// earlier.
    pub fn paused(&self) -> Paused<'_> {
        self.pause();
        Paused {
            server: self,
            resumed: false,
        }
    }

    /// Kills the server with `SIGKILL` and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (after [`RedisServer::kill`]); data is gone.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server on port {} did not become ready again",
            self.port
        );
    }
}

/// A server frozen by [`RedisServer::paused`]; thawed when dropped.
pub struct Paused<'a> {
    server: &'a RedisServer,
    resumed: bool,
}

impl Paused<'_> {
    /// Thaws the server now (`SIGCONT`).
    pub fn resume(mut self) {
        self.thaw();
    }

    fn thaw(&mut self) {
        if !std::mem::replace(&mut self.resumed, true) && self.server.child.is_some() {
            self.server.resume();
        }
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.thaw();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused server ignores SIGTERM but not SIGKILL.
            self.kill();
        }
    }
}
