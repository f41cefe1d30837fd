//! One throwaway Prometheus server on a free loopback port, in a folder of its own (its
//! configuration and its TSDB), stopped by PID and its folder removed when dropped; and a plain
//! HTTP/1.0 GET to its API (no HTTP client crate).

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::free_port;

/// How long a server has to log that it is ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// How long a server has to exit after `SIGTERM` before it gets `SIGKILL`.
const STOP_WITHIN: Duration = Duration::from_secs(5);

/// Folders this process made so far: the second number of their names.
static FOLDERS: AtomicUsize = AtomicUsize::new(0);

/// A real `prometheus` on `127.0.0.1:<port>`, with the configuration it was started with.
///
/// [`Prometheus::start`] writes the configuration (scrape targets, rule files) into a fresh
/// folder under [`std::env::temp_dir`], starts `prometheus` (found on `PATH`, or at
/// `$PROMETHEUS`) with its TSDB in that folder on a free loopback port, and waits for its log
/// line saying it is ready. Dropped (also when a test panics), the server is stopped by PID
/// (`SIGTERM`, `SIGKILL` if it is still there 5 s later) and its folder removed.
/// `scripts/ensure-prometheus.sh` installs Prometheus when it is missing.
pub struct Prometheus {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// The server's log (stderr) so far, for failure messages.
    log: Arc<Mutex<String>>,
}

impl Prometheus {
    /// Starts a server with `config` (a `prometheus.yml`); panics, with its log, if it does not
    /// get ready. A port taken by another process between choosing it and the server binding
    /// it is given up for another one.
    pub fn start(config: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(format!(
            "distlock-prometheus-{}-{}",
            std::process::id(),
            FOLDERS.fetch_add(1, Ordering::Relaxed)
        ));
        // Left behind by an earlier process with this pid, killed before it cleaned up.
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the Prometheus folder");
        fs::write(dir.join("prometheus.yml"), config).expect("write prometheus.yml");
        let mut server = Prometheus {
            dir,
            port: 0,
            child: None,
            log: Arc::default(),
        };
        for _ in 0..3 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "prometheus did not get ready (three free ports tried); its log:\n{}",
            server.log()
        );
    }

    /// Starts the process and waits until it logs that it is ready; false if it exits or does
    /// not get ready in time.
    fn spawn(&mut self) -> bool {
        let binary = std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".to_owned());
        let mut child = Command::new(&binary)
            .arg(format!("--config.file={}", self.dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", self.dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {binary} ({e}); run scripts/ensure-prometheus.sh, which installs it")
            });
        // The server's own log line is the readiness signal; the end of its log, an exit.
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        let log = self.log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let ready = line.contains("Server is ready to receive web requests");
                log.lock().unwrap().push_str(&line);
                log.lock().unwrap().push('\n');
                if ready {
                    let _ = tx.send(true);
                }
            }
            let _ = tx.send(false);
        });
        self.child = Some(child);
        if rx.recv_timeout(READY_WITHIN) == Ok(true) {
            return true;
        }
        self.stop();
        false
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// `GET path` (with its query, already encoded): the status code and the body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let address = format!("127.0.0.1:{}", self.port);
        let mut stream = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connect to prometheus");
        // HTTP/1.0: the server answers with the whole body and closes (no chunks to decode).
        let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.expect("receive");
        let response = String::from_utf8_lossy(&response);
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP response: {head}"));
        (status, body.to_owned())
    }

    /// The JSON of an instant query (`/api/v1/query`) of `expr`, at the server's now.
    pub async fn query(&self, expr: &str) -> String {
        let (status, body) = self
            .get(&format!("/api/v1/query?query={}", encode(expr)))
            .await;
        assert_eq!(status, 200, "query {expr}: {body}");
        body
    }

    /// Stops the server by PID: `SIGTERM`, then `SIGKILL` if it is still there after
    /// [`STOP_WITHIN`]; reaped.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + STOP_WITHIN;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            // Polling the exit of a process: no signal to wait on without blocking for good.
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `text` percent-encoded for a URL's query (every byte but the unreserved ones).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char);
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_what_a_query_string_cannot_hold() {
        assert_eq!(
            super::encode(r#"sum by (lock) (x{lock=~".*"}[5s])"#),
            "sum%20by%20%28lock%29%20%28x%7Block%3D~%22.%2A%22%7D%5B5s%5D%29"
        );
    }
}
