//! Worker processes: this test binary started again with a role, driven by stdin/stdout lines.
//!
//! The parent side ([`Worker`]) spawns, reads the lines a worker says, sends it commands and
//! signals it (`SIGSTOP`/`SIGCONT`/`SIGKILL`). The child side ([`Ctx`]) parses its parameters,
//! says lines and reads commands; a worker exits as soon as its stdin closes, so a crashed
//! suite never leaves workers behind.

use std::collections::HashMap;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::common::lock_unpoisoned;

const ROLE_ENV: &str = "DISTLOCK_RELIABILITY_WORKER";
const PARAMS_ENV: &str = "DISTLOCK_RELIABILITY_PARAMS";

/// The role this process was started with, if it is a worker.
pub(crate) fn role_from_env() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// Entry point of a worker process: runs `dispatch(role, ctx)` (the scenarios' worker roles,
/// passed in by the harness so this module stays below the scenarios that use it).
pub(crate) fn run<F, Fut>(role: &str, dispatch: F) -> ExitCode
where
    F: FnOnce(String, Ctx) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let role = role.to_owned();
    let code = runtime.block_on(async move {
        let ctx = Ctx::from_env();
        match dispatch(role.clone(), ctx).await {
            Ok(()) => 0,
            Err(message) => {
                eprintln!("worker `{role}` failed: {message}");
                1
            }
        }
    });
    // Exit at once: the stdin reader sits in a blocking read that a runtime shutdown would
    // wait for.
    std::process::exit(code)
}

/// The child side: parameters, lines out, commands in.
pub(crate) struct Ctx {
    params: HashMap<String, String>,
    commands: mpsc::UnboundedReceiver<String>,
}

impl Ctx {
    fn from_env() -> Self {
        let params = std::env::var(PARAMS_ENV)
            .unwrap_or_default()
            .split('\u{1f}')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let (tx, commands) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(tokio::io::stdin()).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
            // The suite is gone (or closed our stdin): stop at once.
            std::process::exit(3);
        });
        Ctx { params, commands }
    }

    /// A parameter (panics with its name if the parent did not pass it).
    pub(crate) fn param(&self, key: &str) -> &str {
        self.params
            .get(key)
            .unwrap_or_else(|| panic!("worker parameter `{key}` missing"))
    }

    /// A numeric parameter.
    pub(crate) fn num(&self, key: &str) -> u64 {
        self.param(key)
            .parse()
            .unwrap_or_else(|_| panic!("worker parameter `{key}` is not a number"))
    }

    /// Says one line to the suite.
    pub(crate) fn say(&self, line: impl AsRef<str>) {
        Ctx::say_to_suite(line);
    }

    /// Says one line to the suite, from a task that has no `Ctx` (lines are never interleaved).
    pub(crate) fn say_to_suite(line: impl AsRef<str>) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", line.as_ref());
        let _ = out.flush();
    }

    /// The next command line from the suite.
    pub(crate) async fn command(&mut self) -> String {
        self.commands.recv().await.unwrap_or_default()
    }
}

/// The parent side of one worker process.
pub(crate) struct Worker {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    pid: u32,
}

impl Worker {
    /// Starts this binary as a worker with `role` and `params` (keys and values without `\x1f`).
    pub(crate) fn spawn(name: impl Into<String>, role: &str, params: &[(&str, String)]) -> Worker {
        let name = name.into();
        let params: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .env(ROLE_ENV, role)
            .env(PARAMS_ENV, params.join("\u{1f}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start worker {name}: {e}"));
        let pid = child.id().expect("worker pid");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::unbounded_channel();
        let stdout = child.stdout.take().expect("piped stdout");
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let err_out = child.stderr.take().expect("piped stderr");
        tokio::spawn(async move {
            let mut reader = BufReader::new(err_out).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let mut buf = lock_unpoisoned(&sink);
                if buf.len() < 200 {
                    buf.push(line);
                }
            }
        });
        Worker {
            name,
            child,
            stdin,
            lines,
            stderr,
            pid,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// What the worker wrote to stderr so far (for failure messages).
    pub(crate) fn stderr_tail(&self) -> String {
        let buf = lock_unpoisoned(&self.stderr);
        let start = buf.len().saturating_sub(8);
        buf[start..].join(" | ")
    }

    /// The next line the worker says, or `None` if it said nothing within `within` or exited.
    pub(crate) async fn next_line(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, self.lines.recv())
            .await
            .ok()
            .flatten()
    }

    /// Waits for a line starting with `prefix` (earlier lines are skipped) and returns it;
    /// panics with the worker's stderr if none comes within `within`.
    pub(crate) async fn expect(&mut self, prefix: &str, within: Duration) -> String {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_line(left).await {
                Some(line) if line.starts_with(prefix) => return line,
                Some(_) => continue,
                None => panic!(
                    "worker {} did not say `{prefix}` within {within:?}; stderr: {}",
                    self.name,
                    self.stderr_tail()
                ),
            }
        }
    }

    /// Sends one command line.
    pub(crate) async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("worker stdin open");
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        stdin.write_all(&bytes).await.expect("write to worker");
        stdin.flush().await.expect("flush worker stdin");
    }

    /// Sends a signal (`STOP`, `CONT`, `KILL`) with `kill(1)`.
    pub(crate) fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {} failed", self.pid);
    }

    /// Kills the worker with `SIGKILL` and reaps it.
    pub(crate) async fn kill(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait().await;
    }

    /// Tells a worker that waits for `EXIT` to exit and returns its exit code (panics after
    /// 10 s).
    pub(crate) async fn exit(&mut self) -> Option<i32> {
        self.send("EXIT").await;
        self.finish(Duration::from_secs(10)).await
    }

    /// Waits for the worker to exit by itself and returns its exit code (panics after `within`).
    pub(crate) async fn finish(&mut self, within: Duration) -> Option<i32> {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => panic!("worker {} did not exit within {within:?}", self.name),
        }
    }
}

/// Parses `key=value` words of a worker line.
pub(crate) fn fields(line: &str) -> HashMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

/// A numeric field of a worker line (panics with the line if missing).
pub(crate) fn field_u64(line: &str, key: &str) -> u64 {
    fields(line)
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric `{key}` in worker line `{line}`"))
}
