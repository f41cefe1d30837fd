//! What the CLI tests share: the built binary run as an operator would, and locks held through
//! distlock's API on a throwaway server.

use std::process::Stdio;
use std::time::Duration;

use distlock::redis;
use distlock::testing::TestRedis;
use distlock::{Client, LockGuard};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// What one run of the binary did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Asserts the exit status, showing the output when it differs.
    pub(crate) fn status(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "{self:#?}");
        self
    }
}

/// The binary with no `DISTLOCK_*` variable from the environment of the test.
pub(crate) fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DISTLOCK_") {
            cmd.env_remove(name);
        }
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

pub(crate) async fn run_with(args: &[&str], input: Option<&str>) -> Run {
    let mut cmd = command(args);
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().expect("run the distlock binary");
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes()).await.unwrap();
    }
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the binary finishes")
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub(crate) async fn run(args: &[&str]) -> Run {
    run_with(args, None).await
}

pub(crate) async fn conn(redis: &TestRedis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

pub(crate) async fn client(redis: &TestRedis) -> Client {
    redis.config().connect().await.unwrap()
}

pub(crate) async fn hold(client: &Client, name: &str) -> LockGuard {
    client
        .lock(name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap()
}
