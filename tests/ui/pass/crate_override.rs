#![deny(warnings)]
//! `crate = "..."`: a framework that re-exports distlock points the generated code at its own
//! path. The path here leads to a module that counts calls to `run`, which shows the generated
//! code goes through it (and names nothing else).

#[path = "../support.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use support::{expect_not_initialized, AppError};

static RUNS: AtomicUsize = AtomicUsize::new(0);

mod framework {
    pub mod distlock {
        pub use ::distlock::distributed_lock;

        pub mod __private {
            use std::future::Future;
            use std::sync::atomic::Ordering;

            // Everything a function without `skip` needs, with `run` replaced.
            pub use ::distlock::__private::{assert_lock_result, KeyBuilder, LockSpec};

            pub async fn run<T, E, F>(spec: LockSpec, key: String, body: F) -> Result<T, E>
            where
                F: Future<Output = Result<T, E>>,
                E: From<::distlock::Error>,
            {
                crate::RUNS.fetch_add(1, Ordering::SeqCst);
                ::distlock::__private::run(spec, key, body).await
            }
        }
    }
}

#[framework::distlock::distributed_lock(key = "job:<id>", crate = "crate::framework::distlock")]
async fn job(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    expect_not_initialized(job(1));
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);
}
