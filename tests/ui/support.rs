//! Shared by the pass cases (`#[path = "../support.rs"] mod support;`): an application error
//! type and a way to run a locked function without Redis. No client is installed, so every
//! lock fails with `NotInitialized` before anything connects, which shows that the body was
//! wrapped and the lock error came back through the function's own error type.
#![allow(dead_code)]

use std::future::Future;

#[derive(Debug)]
pub enum AppError {
    Lock(distlock::Error),
    Io(std::io::Error),
    Invalid(&'static str),
}

impl From<distlock::Error> for AppError {
    fn from(error: distlock::Error) -> Self {
        AppError::Lock(error)
    }
}

impl From<std::io::Error> for AppError {
    fn from(error: std::io::Error) -> Self {
        AppError::Io(error)
    }
}

pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// Runs `future` and checks that it failed to take its lock because no client is installed.
pub fn expect_not_initialized<T: std::fmt::Debug, F>(future: F)
where
    F: Future<Output = Result<T, AppError>>,
{
    match block_on(future) {
        Err(AppError::Lock(distlock::Error::NotInitialized)) => {}
        other => panic!("expected Err(NotInitialized), got {other:?}"),
    }
}

/// The future can be spawned on a multi-threaded runtime.
pub fn assert_send<T: Send>(value: T) -> T {
    value
}

/// Extractor-shaped newtypes, as axum's (`Path(id): Path<u64>`), for the pattern cases.
pub struct Path<T>(pub T);
pub struct Json<T>(pub T);
pub struct State<T>(pub T);
