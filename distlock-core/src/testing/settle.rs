//! What the kit's deployments of several processes share while they start and settle: a look
//! again until a state is reached, and a temporary folder of their own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::testing::process::failed;

/// Between two looks at a state a deployment is settling into.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Tells the folders of one test process apart.
static FOLDERS: AtomicU64 = AtomicU64::new(0);

/// Looks at `state` every [`LOOK_EVERY`] until it is `Some`, for `within` at most.
pub(crate) async fn until<T, F, S>(within: Duration, what: &str, mut state: S) -> std::io::Result<T>
where
    S: FnMut() -> F,
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(reached) = state().await {
            return Ok(reached);
        }
        if Instant::now() >= deadline {
            return Err(failed(format!("waited {within:?} for {what}")));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// A Redis error as the kit's I/O error.
pub(crate) fn io(e: redis::RedisError) -> std::io::Error {
    failed(e.to_string())
}

/// A temporary folder of a deployment's (`kind` names it), removed when dropped.
pub(crate) struct Folder(PathBuf);

impl Folder {
    pub(crate) fn new(kind: &str) -> std::io::Result<Folder> {
        let n = FOLDERS.fetch_add(1, Ordering::Relaxed);
        let name = format!("distlock-testing-{kind}-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(Folder(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
