//! A test of this binary run as a child process: the way a test puts a lock holder in another
//! process, to `SIGKILL` or `SIGSTOP` it.
//!
//! The test binary runs again with `--exact <test>`, and an environment variable that the child
//! test reads to know it is the child (without it, that test does nothing). The child reports
//! through its stdout lines (`held`, `lost: …`); the parent waits for them with
//! [`ChildTest::expect`], signals the child by PID, and kills it when the handle is dropped
//! (after a `SIGCONT`, so a stopped child dies too).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

/// A child process running one test of this binary; killed when dropped.
pub struct ChildTest {
    child: Child,
    pid: u32,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ChildTest {
    /// Runs the test named `test` of this binary in a child process, with `var` set in its
    /// environment (`(name, value)`: what tells the child test what to do).
    pub fn spawn(test: &str, var: (&str, String)) -> ChildTest {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(var.0, var.1)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start the child test");
        let pid = child.id().expect("the child's pid");
        let stdout = child.stdout.take().expect("the child's stdout");
        ChildTest {
            child,
            pid,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// Waits for a line containing `text` (panics after `within`, or if the child ends first);
    /// returns it.
    pub async fn expect(&mut self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no `{text}` from the child within {within:?}"))
                .expect("read the child's stdout")
                .unwrap_or_else(|| panic!("the child ended before `{text}`"));
            if line.contains(text) {
                return line;
            }
        }
    }

    /// The child's next line of output, or `None` if it ends first; panics after `within`.
    pub async fn next_line(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no line from the child within {within:?}"))
            .expect("read the child's stdout")
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, …) to the child; panics if `kill` fails, except
    /// for `CONT` (the child may be gone already).
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .expect("run kill");
        assert!(
            status.success() || signal == "CONT",
            "kill -{signal} {} failed",
            self.pid
        );
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for the child to exit by itself (panics after `within`); its exit status.
    pub async fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the child did not exit within {within:?}"))
            .expect("wait for the child")
    }
}

impl Drop for ChildTest {
    fn drop(&mut self) {
        self.signal("CONT");
        let _ = self.child.start_kill();
    }
}
