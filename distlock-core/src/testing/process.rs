//! A `redis-server` process (a data server or a sentinel) supervised so that it never
//! outlives the test process: it runs under a small `sh` that kills it when the test
//! process's end of a pipe closes, however the test process exits.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a server may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// Runs the binary `$1` with the arguments after it, and kills it when standard input closes:
/// the test process holds the other end of that pipe until it exits. `SIGCONT` after the kill:
/// a server a test left paused (`SIGSTOP`) handles no `SIGTERM` until it runs again.
const SUPERVISOR: &str = r#"bin="$1"; shift
command -v "$bin" >/dev/null 2>&1 || { echo "distlock-testing: $bin not found"; exit 127; }
"$bin" "$@" 2>&1 &
server=$!
read -r _ || true
kill "$server" 2>/dev/null
kill -CONT "$server" 2>/dev/null
wait "$server" 2>/dev/null
"#;

/// What a server's log said first: it is ready (with its process id), or it cannot start.
enum Started {
    Ready(u32),
    Failed(String),
}

/// A supervised `redis-server`, stopped when dropped.
pub(crate) struct Supervised {
    supervisor: Child,
    /// Closing this (dropping it) stops the server.
    stdin: Option<ChildStdin>,
    /// The server's own process id (not the supervisor's): what a pause signals.
    pid: u32,
}

impl Supervised {
    /// The `redis-server` binary: `REDIS_SERVER`, or `redis-server` on the `PATH`.
    pub(crate) fn binary() -> String {
        std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
    }

    /// Starts `redis-server` with `args` (its log on standard output) and waits until a line
    /// of its log contains `ready`.
    ///
    /// # Errors
    ///
    /// When `redis-server` (or `sh`) cannot be run, the server gives up (its port taken, an
    /// option it does not know), or it is not ready within 10 s; the message says which.
    pub(crate) fn start(args: &[String], ready: &'static str) -> std::io::Result<Supervised> {
        let binary = Self::binary();
        let mut supervisor = Command::new("sh")
            .args(["-c", SUPERVISOR, "sh", &binary])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed(format!("cannot run `sh` to start redis-server: {e}")))?;
        let stdin = supervisor.stdin.take();
        let Some(stdout) = supervisor.stdout.take() else {
            return Err(failed("redis-server's output is not piped".to_owned()));
        };
        let mut process = Supervised {
            supervisor,
            stdin,
            pid: 0,
        };
        let (started, first) = mpsc::channel();
        // Reads the log until it says how the start went, and keeps draining it afterwards.
        std::thread::spawn(move || {
            let mut started = Some(started);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let outcome = if line.contains(ready) {
                    // Every line of a server's log starts with its process id: `1234:M ...`.
                    match line.split(':').next().and_then(|pid| pid.parse().ok()) {
                        Some(pid) => Started::Ready(pid),
                        None => Started::Failed(format!("no process id in `{line}`")),
                    }
                } else if line.starts_with("distlock-testing:") {
                    Started::Failed(format!(
                        "{}; install redis-server (e.g. `apt-get install redis-server`) or set REDIS_SERVER to its path",
                        line.trim_start_matches("distlock-testing: ")
                    ))
                } else if line.contains("# Failed") || line.contains("FATAL") {
                    Started::Failed(format!("redis-server gave up: {line}"))
                } else {
                    continue;
                };
                if let Some(started) = started.take() {
                    let _ = started.send(outcome);
                }
            }
        });
        match first.recv_timeout(READY_WITHIN) {
            Ok(Started::Ready(pid)) => {
                process.pid = pid;
                Ok(process)
            }
            Ok(Started::Failed(why)) => Err(failed(why)),
            Err(_) => Err(failed(format!(
                "{binary} did not become ready within {READY_WITHIN:?}"
            ))),
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the server.
    ///
    /// # Errors
    ///
    /// If `kill` cannot be run or fails.
    pub(crate) fn signal(&self, signal: &str) -> std::io::Result<()> {
        let pid = self.pid.to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .map_err(|e| failed(format!("cannot run `kill {signal}`: {e}")))?;
        match status.success() {
            true => Ok(()),
            false => Err(failed(format!("`kill {signal} {pid}` failed"))),
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // The supervisor kills the server when its standard input closes.
        drop(self.stdin.take());
        let _ = self.supervisor.wait();
    }
}

/// An error that says it comes from the testing kit.
pub(crate) fn failed(message: String) -> std::io::Error {
    std::io::Error::other(format!("distlock::testing: {message}"))
}
