#![deny(warnings)]
//! `crate = "..."`: a framework that re-exports distlock points the generated code at its own
//! path. The path here leads to a module that counts calls to `lock`, which shows the generated
//! code goes through it (and names nothing else).

#[path = "../support.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use support::{expect_not_initialized, AppError};

static LOCKS: AtomicUsize = AtomicUsize::new(0);

mod framework {
    pub mod distlock {
        pub use ::distlock::distributed_lock;

        pub mod __private {
            use std::sync::atomic::Ordering;

            // Everything a function without `skip` needs, with `lock` replaced.
            pub use ::distlock::__private::{key, lock_error, part, StdDuration};

            pub fn lock(name: String) -> ::distlock::LockBuilder {
                crate::LOCKS.fetch_add(1, Ordering::SeqCst);
                ::distlock::lock(name)
            }
        }
    }
}

#[framework::distlock::distributed_lock(key = "job:<id>", ttl = "1s", crate = "crate::framework::distlock")]
async fn job(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    expect_not_initialized(job(1));
    assert_eq!(LOCKS.load(Ordering::SeqCst), 1);
}
