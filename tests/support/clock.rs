//! A server whose wall clock a test steps ([`ShiftedClock`]): Redis keeps a key's expiry as a
//! wall-clock date, so a step forward expires keys early, as `date -s` or an NTP step on the
//! server's host would. The server runs with a small `LD_PRELOAD` library (`clock_shift.c`,
//! built here with the C compiler every Rust toolchain links with) that adds an offset to the
//! real-time clock only; the offset lives in a file the library maps, so a step takes effect
//! at the server's next clock read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use distlock::Config;

use crate::belief::{self, Kind, Round, Timeline};
use crate::cluster::RedisCluster;
use crate::server::{RedisServer, ServerOptions};

/// The source of the library, built once per test process.
const SOURCE: &str = include_str!("clock_shift.c");

/// The offset file of a clock that servers run on.
pub struct ShiftedClock {
    file: PathBuf,
    offset_us: Mutex<i64>,
}

impl ShiftedClock {
    /// A clock at no offset, for the servers started with [`ShiftedClock::options`].
    pub fn new() -> ShiftedClock {
        let file = std::env::temp_dir().join(format!(
            "distlock-clock-{}-{}",
            std::process::id(),
            crate::server::free_port()
        ));
        std::fs::write(&file, 0i64.to_le_bytes()).expect("write the clock offset file");
        ShiftedClock {
            file,
            offset_us: Mutex::new(0),
        }
    }

    /// Server options whose server runs on this clock (every server started with them shares
    /// it, as the servers of one host do).
    pub fn options(&self) -> ServerOptions {
        ServerOptions {
            env: vec![
                ("LD_PRELOAD".into(), library().display().to_string()),
                ("CLOCK_SHIFT_FILE".into(), self.file.display().to_string()),
            ],
            ..Default::default()
        }
    }

    /// Starts a server whose wall clock this handle steps (starting at no offset).
    pub fn server() -> (RedisServer, ShiftedClock) {
        let clock = ShiftedClock::new();
        (RedisServer::start_with(clock.options()), clock)
    }

    /// Steps the servers' wall clock forward by `by` (their monotonic clocks keep running).
    pub fn step_forward(&self, by: Duration) {
        self.shift(i64::try_from(by.as_micros()).expect("step fits"));
    }

    /// Steps the servers' wall clock back by `by`.
    pub fn step_back(&self, by: Duration) {
        self.shift(-i64::try_from(by.as_micros()).expect("step fits"));
    }

    fn shift(&self, us: i64) {
        let mut offset = self.offset_us.lock().unwrap();
        *offset += us;
        // In place: the server maps the file, so it must keep its inode.
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.file)
            .expect("open the clock offset file");
        f.seek(std::io::SeekFrom::Start(0)).expect("seek");
        f.write_all(&offset.to_le_bytes())
            .expect("write the offset");
    }
}

impl Drop for ShiftedClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// The library, compiled on first use into the temp folder.
fn library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("distlock-clock-lib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let source = dir.join("clock_shift.c");
        std::fs::write(&source, SOURCE).expect("write the library source");
        let lib = dir.join("libclockshift.so");
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&lib)
            .arg(&source)
            .status()
            .expect("run the C compiler (cc) to build the clock library");
        assert!(status.success(), "building the clock library failed");
        lib
    })
}

impl Default for ShiftedClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a [`step_round`] runs, on a clock it steps.
#[derive(Clone, Copy, Debug)]
pub enum Stepped {
    /// One server.
    Server,
    /// A cluster of three masters, every node on the stepped clock (one host).
    Cluster,
    /// A RedLock quorum of three masters, the first `stepped` of them on the stepped clock.
    Quorum {
        /// Masters whose clock steps.
        stepped: usize,
    },
}

/// One `belief` round (a fenced lock of `ttl`, renewed if `renew`, held for `run`) on a fresh
/// deployment whose servers' wall clock steps by `step` (forward if `forward`) 1 s in.
pub async fn step_round(
    on: Stepped,
    lease: (Duration, bool, Duration),
    step: (bool, Duration),
) -> Timeline {
    step_round_of(Kind::Lock, on, lease, step).await
}

/// [`step_round`] over a hold of `kind` (a semaphore's permit, a read hold against a writer).
pub async fn step_round_of(
    kind: Kind,
    on: Stepped,
    (ttl, renew, run): (Duration, bool, Duration),
    (forward, step): (bool, Duration),
) -> Timeline {
    let clock = Arc::new(ShiftedClock::new());
    let options = clock.options();
    let started = tokio::task::spawn_blocking(move || match on {
        Stepped::Server => (vec![RedisServer::start_with(options)], None),
        Stepped::Cluster => (Vec::new(), Some(RedisCluster::start_with(3, 0, options))),
        Stepped::Quorum { stepped } => {
            let masters = (0..3)
                .map(|i| match i < stepped {
                    true => RedisServer::start_with(options.clone()),
                    false => RedisServer::start(),
                })
                .collect();
            (masters, None)
        }
    })
    .await
    .expect("start the servers");
    let (servers, cluster) = started;
    let urls: Vec<String> = match &cluster {
        Some(cluster) => cluster.urls(),
        None => servers.iter().map(RedisServer::url).collect(),
    };
    let config = move || match on {
        Stepped::Server => Config::new(urls[0].clone()),
        Stepped::Cluster => Config::cluster(urls.clone()),
        Stepped::Quorum { .. } => Config::redlock(urls.clone()),
    };
    let round = Round::with_config(config, ttl, renew, run).of(kind);
    let (timeline, _guard) = belief::round(round, move || match forward {
        true => clock.step_forward(step),
        false => clock.step_back(step),
    })
    .await;
    drop((servers, cluster));
    timeline
}
