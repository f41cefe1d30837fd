//! A `redis-server` (testkit's) on a frozen clock that the test moves (`frozen_clock.c`).

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use testkit::{RedisServer, ServerOptions};

/// The server and the file its clock reads.
pub(crate) struct FrozenServer {
    pub(crate) server: RedisServer,
    file: PathBuf,
}

fn library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("distlock-frozen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let source = dir.join("frozen_clock.c");
        std::fs::write(&source, include_str!("frozen_clock.c")).expect("write the source");
        let lib = dir.join("libfrozenclock.so");
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&lib)
            .arg(&source)
            .status()
            .expect("run the C compiler (cc) to build the frozen clock");
        assert!(status.success(), "building the frozen clock library failed");
        lib
    })
}

impl FrozenServer {
    /// Starts a server whose clock reads `at_us` (µs since the epoch) until [`Self::set`].
    pub(crate) fn start(at_us: i64) -> FrozenServer {
        let file = std::env::temp_dir().join(format!(
            "distlock-frozen-clock-{}-{}",
            std::process::id(),
            testkit::free_port()
        ));
        std::fs::write(&file, record(at_us)).expect("write the clock file");
        let server = RedisServer::start_with(ServerOptions {
            // No active expiry: the server's background cycle would delete keys at moments of
            // its own; every key the test looks at is expired by its read, on the test's clock.
            args: vec!["--enable-debug-command".into(), "yes".into()],
            env: vec![
                ("LD_PRELOAD".into(), library().display().to_string()),
                ("FROZEN_CLOCK_FILE".into(), file.display().to_string()),
            ],
            ..Default::default()
        });
        FrozenServer { server, file }
    }

    /// Turns the server's active expiry off (see [`Self::start`]).
    pub(crate) fn no_active_expiry(conn: &mut crate::resp::Conn) {
        let reply = conn.call(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
        assert_eq!(
            reply,
            crate::resp::Resp::Simple("OK".into()),
            "DEBUG SET-ACTIVE-EXPIRE 0"
        );
    }

    /// Sets the server's wall clock (in place: the server maps the file).
    pub(crate) fn set(&self, at_us: i64) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.file)
            .expect("open the clock file");
        f.seek(SeekFrom::Start(0)).expect("seek");
        f.write_all(&record(at_us)).expect("write the clock");
    }
}

/// The clock file's content: the time and its complement (see `frozen_clock.c`).
fn record(at_us: i64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&at_us.to_le_bytes());
    out[8..].copy_from_slice(&(!at_us).to_le_bytes());
    out
}

impl Drop for FrozenServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}
