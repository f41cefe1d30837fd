#![deny(warnings)]
//! The future of a locked function is `Send` exactly when its body is: annotated fns, methods,
//! `async_trait` methods and hand-written `run`s go to `tokio::spawn` on a multi-threaded
//! runtime, and a body that holds an `Rc` across an await still compiles (and runs where
//! non-`Send` futures run).

#[path = "../support.rs"]
mod support;

use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use async_trait::async_trait;
use distlock::distributed_lock;
use support::AppError;

/// Only a `Send + 'static` future can be spawned.
fn spawnable<F: Future + Send + 'static>(future: F) -> F {
    future
}

#[distributed_lock(key = "order:<id>:<shard>", ttl = "10s", renew, wait = "2s")]
async fn settle(id: u64, shard: u8) -> Result<u64, AppError> {
    tokio::task::yield_now().await;
    Ok(id + u64::from(shard))
}

#[distributed_lock(key = "fenced:<id>", fenced, min_hold = "1s")]
async fn fenced(id: u64) -> Result<Option<u64>, AppError> {
    Ok(distlock::fencing_token().map(|t| t + id))
}

#[distributed_lock(key = "nightly", skip)]
async fn nightly() -> Result<Option<u32>, AppError> {
    Ok(Some(1))
}

#[derive(Clone)]
pub struct Service {
    tenant: String,
}

impl Service {
    #[distributed_lock(key = "user:<self.tenant>:<id>")]
    async fn update(self, id: u64) -> Result<String, AppError> {
        tokio::task::yield_now().await;
        Ok(format!("{}:{id}", self.tenant))
    }
}

#[async_trait]
pub trait Jobs {
    async fn run_job(&self, id: u64) -> Result<u64, AppError>;
}

#[async_trait]
impl Jobs for Service {
    #[distributed_lock(key = "job:<self.tenant>:<id>", ttl = "5s", renew)]
    async fn run_job(&self, id: u64) -> Result<u64, AppError> {
        tokio::task::yield_now().await;
        Ok(id)
    }
}

/// The hand-written form of `settle`.
async fn settle_by_hand(id: u64) -> Result<u64, AppError> {
    distlock::lock(format!("order:{id}"))
        .ttl(Duration::from_secs(10))
        .renew(true)
        .run(async move {
            tokio::task::yield_now().await;
            Ok(id)
        })
        .await?
}

// A body that holds an `Rc` across an await: not `Send`, still a locked function.
#[distributed_lock(key = "local:<id>")]
async fn local(id: u64) -> Result<u64, AppError> {
    let shared = Rc::new(id);
    tokio::task::yield_now().await;
    Ok(*shared)
}

async fn local_by_hand(id: u64) -> Result<u64, AppError> {
    distlock::lock("local")
        .run(async move {
            let shared = Rc::new(id);
            tokio::task::yield_now().await;
            Ok(*shared)
        })
        .await?
}

fn not_initialized<T: std::fmt::Debug>(result: Result<T, AppError>) {
    match result {
        Err(AppError::Lock(distlock::Error::NotInitialized)) => {}
        other => panic!("expected Err(NotInitialized), got {other:?}"),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let service = Service {
            tenant: "acme".to_owned(),
        };
        not_initialized(tokio::spawn(spawnable(settle(1, 2))).await.unwrap());
        not_initialized(tokio::spawn(spawnable(fenced(3))).await.unwrap());
        not_initialized(tokio::spawn(spawnable(nightly())).await.unwrap());
        not_initialized(
            tokio::spawn(spawnable(service.clone().update(4)))
                .await
                .unwrap(),
        );
        let job = service.clone();
        not_initialized(
            tokio::spawn(spawnable(async move { job.run_job(5).await }))
                .await
                .unwrap(),
        );
        not_initialized(tokio::spawn(spawnable(settle_by_hand(6))).await.unwrap());

        // Not `Send`: run in place, or on a `LocalSet`.
        not_initialized(local(7).await);
        let tasks = tokio::task::LocalSet::new();
        not_initialized(
            tasks
                .run_until(async { tokio::task::spawn_local(local(8)).await.unwrap() })
                .await,
        );
        not_initialized(local_by_hand(9).await);
    });
}
