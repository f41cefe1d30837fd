//! One throwaway PostgreSQL server on a free loopback port: `initdb` into a temporary data
//! directory, `pg_ctl start`, stopped by PID (`SIGQUIT`) and its directory removed when dropped.

use std::fs;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::server::free_port;

/// How long a server has to exit after `SIGQUIT` before it gets `SIGKILL`.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// Where Debian installs each PostgreSQL version's programs (`<version>/bin`), off `PATH`.
const DEBIAN_VERSIONS: &str = "/usr/lib/postgresql";

/// Data directories this process made so far: the second number of their names.
static DATA_DIRS: AtomicUsize = AtomicUsize::new(0);

/// A real PostgreSQL server (`postgres`) on `127.0.0.1:<port>`, in a data directory of its own.
///
/// [`PostgresServer::start`] finds `initdb` and `pg_ctl` ([`PostgresServer::binary`]), runs
/// `initdb` into a fresh directory under [`std::env::temp_dir`] (superuser `postgres`, UTF-8,
/// locale `C`, `trust` authentication) and `pg_ctl start` on a free port. Anyone on the loopback
/// interface may connect as any role without a password, so the server listens on `127.0.0.1`
/// only (and on a Unix socket in its data directory). Durability is off (`fsync`,
/// `synchronous_commit`, `full_page_writes`): a crash may lose the data, which no test keeps.
///
/// PostgreSQL refuses to run as root: a root process runs `initdb` and `pg_ctl` as the
/// `postgres` system user (which Debian's `postgresql` package creates), and gives it the data
/// directory. The server is stopped by PID when dropped: `SIGQUIT` (an immediate shutdown),
/// `SIGKILL` if it is still there 10 s later; then its directory is removed.
/// `scripts/ensure-postgres.sh` installs PostgreSQL when it is missing.
pub struct PostgresServer {
    dir: PathBuf,
    port: u16,
    /// The postmaster's process id, once it runs.
    pid: Option<u32>,
    /// `(uid, gid)` the server's programs run as; `None`: this process's own.
    owner: Option<(u32, u32)>,
}

impl PostgresServer {
    /// Starts a server in a new data directory on a free port; panics (with `initdb`'s or the
    /// server's output) if it does not start. A port taken by another process between choosing
    /// it and the server binding it is given up for another one.
    pub fn start() -> PostgresServer {
        let initdb = Self::binary("initdb");
        let pg_ctl = Self::binary("pg_ctl");
        let owner = server_owner();
        let dir = std::env::temp_dir().join(format!(
            "distlock-postgres-{}-{}",
            std::process::id(),
            DATA_DIRS.fetch_add(1, Ordering::Relaxed)
        ));
        // Left behind by an earlier process with this pid, killed before it cleaned up.
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the PostgreSQL data directory");
        // From here a panic drops the server: its directory goes, and its postmaster if any.
        let mut server = PostgresServer {
            dir,
            port: 0,
            pid: None,
            owner,
        };
        fs::set_permissions(&server.dir, fs::Permissions::from_mode(0o700))
            .expect("make the data directory private");
        if let Some((uid, gid)) = server.owner {
            chown(&server.dir, Some(uid), Some(gid)).expect("give the data directory to postgres");
        }
        let init = server
            .command(&initdb)
            .arg("-D")
            .arg(&server.dir)
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            // Not the environment's locale, which may not be installed (initdb fails then).
            .arg("--locale=C")
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run {} ({e}){}", initdb.display(), server.as_whom())
            });
        if !init.status.success() {
            panic!("initdb failed ({}):\n{}", init.status, both(&init));
        }
        let mut failures = String::new();
        for _ in 0..3 {
            server.port = free_port();
            match server.try_start(&pg_ctl) {
                Ok(pid) => {
                    server.pid = Some(pid);
                    return server;
                }
                Err(output) => failures.push_str(&output),
            }
        }
        let log = fs::read_to_string(server.dir.join("log")).unwrap_or_default();
        panic!("postgres did not start (three free ports tried):\n{failures}\nits log:\n{log}");
    }

    /// Where PostgreSQL's program `name` (`initdb`, `pg_ctl`, `psql`, …) is: on `PATH`, or else
    /// in `/usr/lib/postgresql/<highest version>/bin` (where Debian puts them). Panics, saying to
    /// run `scripts/ensure-postgres.sh`, when neither has it.
    pub fn binary(name: &str) -> PathBuf {
        let on_path = std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(DEBIAN_VERSIONS)
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                let name = path.file_name()?.to_str()?;
                // "15", or "9.6" before PostgreSQL 10.
                let version = name
                    .split('.')
                    .map(|n| n.parse().ok())
                    .collect::<Option<_>>()?;
                Some((version, path.join("bin")))
            })
            .collect();
        versions.sort();
        on_path
            .into_iter()
            .chain(versions.into_iter().rev().map(|(_, bin)| bin))
            .map(|dir| dir.join(name))
            .find(|path| is_executable(path))
            .unwrap_or_else(|| {
                panic!(
                    "PostgreSQL's {name} is neither on PATH nor in {DEBIAN_VERSIONS}/*/bin; \
                     run scripts/ensure-postgres.sh, which installs it"
                )
            })
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`: the superuser, no password (trust).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id.
    pub fn pid(&self) -> u32 {
        self.pid.expect("server is running")
    }

    /// The server's data directory (also holding its log, `log`, and its Unix socket); removed
    /// when the server is dropped.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// `program`, run as the server's owner in its data directory, without input.
    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command.current_dir(&self.dir).stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            command.uid(uid).gid(gid);
        }
        command
    }

    /// For a message on a program that did not run: as whom, in which directory (the `postgres`
    /// user cannot reach a temporary folder that only root may enter, `TMPDIR` under `/root`).
    fn as_whom(&self) -> String {
        let whom = if self.owner.is_some() {
            "the postgres user"
        } else {
            "this process's user"
        };
        format!(" as {whom} in {}", self.dir.display())
    }

    /// Starts the server on `self.port` and waits (30 s at most) until it accepts connections;
    /// its postmaster's PID, or else `pg_ctl`'s output (a postmaster still starting is stopped).
    fn try_start(&self, pg_ctl: &Path) -> Result<u32, String> {
        let dir = self.dir.display();
        let options = format!(
            "-p {} -k '{dir}' -c listen_addresses=127.0.0.1 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            self.port
        );
        let started = self
            .command(pg_ctl)
            .arg("-D")
            .arg(&self.dir)
            .args(["-w", "-t", "30", "-l"])
            .arg(self.dir.join("log"))
            .args(["start", "-o", &options])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} ({e}){}", pg_ctl.display(), self.as_whom()));
        if started.status.success() {
            if let Some(pid) = self.pid_file() {
                return Ok(pid);
            }
        }
        // A postmaster that did not get ready in time may still be starting.
        if let Some(pid) = self.pid_file() {
            stop(pid);
        }
        Err(format!(
            "pg_ctl start on port {} ({}):\n{}",
            self.port,
            started.status,
            both(&started)
        ))
    }

    /// The PID on the first line of `postmaster.pid` (which a running server keeps).
    fn pid_file(&self) -> Option<u32> {
        let text = fs::read_to_string(self.dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            stop(pid);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Who runs the server: `None` (this process's user), or the `postgres` system user's
/// `(uid, gid)` when this process is root, which `initdb` and `postgres` refuse to run as.
fn server_owner() -> Option<(u32, u32)> {
    let uid = fs::metadata("/proc/self").map(|m| m.uid()).or_else(|_| {
        let out = Command::new("id").arg("-u").output()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(std::io::Error::other)
    });
    if uid.expect("this process's user id (/proc/self or `id -u`)") != 0 {
        return None;
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let postgres = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        match fields[..] {
            ["postgres", _, uid, gid, ..] => Some((uid.parse().ok()?, gid.parse().ok()?)),
            _ => None,
        }
    });
    Some(postgres.unwrap_or_else(|| {
        panic!(
            "PostgreSQL refuses to run as root and there is no `postgres` user to run it as: \
             install Debian's postgresql package (scripts/ensure-postgres.sh), which creates it"
        )
    }))
}

/// Stops the postmaster `pid`: `SIGQUIT` (immediate shutdown: it quits its backends and exits),
/// `SIGKILL` if it has not exited within [`STOP_WITHIN`].
fn stop(pid: u32) {
    signal("-QUIT", pid);
    if !exited_within(pid, STOP_WITHIN) {
        signal("-KILL", pid);
        exited_within(pid, Duration::from_secs(2));
    }
}

/// Sends `sig` to `pid` with `kill`; whether it was delivered (`-0`: whether `pid` exists).
fn signal(sig: &str, pid: u32) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits up to `within` for `pid` to exit; whether it did.
fn exited_within(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if !running(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` is a live process. An exited one that no one reaped yet (a zombie) is not: the
/// postmaster is `pg_ctl`'s orphan, which only an init process reaps, and the PID 1 of some
/// containers never does.
fn running(pid: u32) -> bool {
    if !signal("-0", pid) {
        return false;
    }
    // `<pid> (<name>) <state> …`; the name may hold spaces and parentheses.
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    state != Some("Z")
}

/// Whether `path` is a file someone may execute.
fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A program's stdout and stderr, as text.
fn both(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
