//! Races over the lock family's shared kinds: a semaphore's permits, and readers with writers
//! (`tests/permits.rs`, `tests/read_holds.rs`, `tests/redlock_kinds.rs`; one server, a cluster
//! or a RedLock quorum, whatever the clients reach).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::Client;
use tokio::time::Instant;

/// `tasks` tasks per client each take a permit of the semaphore `name` of `permits`, `rounds`
/// times, and stay inside for `hold`; returns the most bodies ever inside at once. Panics if
/// a permit is not had within a minute's wait, or is lost.
pub async fn permit_race(
    clients: &[Client],
    (tasks, rounds): (usize, usize),
    (name, permits): (&str, u32),
    hold: Duration,
) -> usize {
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for client in clients {
        for _ in 0..tasks {
            let (client, inside, most) = (client.clone(), inside.clone(), most.clone());
            let name = name.to_owned();
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    client
                        .semaphore(name.as_str(), permits)
                        .ttl(Duration::from_secs(5))
                        .wait(Duration::from_secs(60))
                        .run(async {
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            tokio::time::sleep(hold).await;
                            inside.fetch_sub(1, Ordering::SeqCst);
                        })
                        .await
                        .expect("a permit within the wait, held throughout");
                }
            }));
        }
    }
    for handle in handles {
        handle.await.expect("a racer panicked");
    }
    most.load(Ordering::SeqCst)
}

/// Who is inside the bodies of one name: readers and writers, and what was seen.
#[derive(Default, Debug)]
pub struct Inside {
    /// Readers inside now.
    pub readers: AtomicUsize,
    /// Writers inside now.
    pub writers: AtomicUsize,
    /// The most readers inside at once.
    pub most_readers: AtomicUsize,
    /// Reads done.
    pub reads: AtomicUsize,
    /// Writes done.
    pub writes: AtomicUsize,
    /// A writer saw anyone else inside, or a reader saw a writer.
    pub overlap: AtomicBool,
}

impl Inside {
    /// A read body: inside for `hold`, looking for a writer on the way in and out.
    pub async fn read(&self, hold: Duration) {
        let now = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(now, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.overlap.store(true, Ordering::SeqCst);
        }
        tokio::time::sleep(hold).await;
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.overlap.store(true, Ordering::SeqCst);
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    /// A write body: inside for `hold`, looking for anyone else on the way in and out.
    pub async fn write(&self, hold: Duration) {
        let writers = self.writers.fetch_add(1, Ordering::SeqCst) + 1;
        if writers != 1 || self.readers.load(Ordering::SeqCst) != 0 {
            self.overlap.store(true, Ordering::SeqCst);
        }
        tokio::time::sleep(hold).await;
        if self.readers.load(Ordering::SeqCst) != 0 {
            self.overlap.store(true, Ordering::SeqCst);
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Over `clients`, `readers` reader tasks and `writers` writer tasks per client each take
/// `name` `rounds` times (readers inside for `holds.0`, writers for `holds.1`). Panics if a
/// hold is not had within a minute's wait, or is lost.
pub async fn read_write_race(
    clients: &[Client],
    (readers, writers): (usize, usize),
    (name, rounds): (&str, usize),
    (read_hold, write_hold): (Duration, Duration),
) -> Arc<Inside> {
    let inside = Arc::new(Inside::default());
    let mut handles = Vec::new();
    for client in clients {
        for task in 0..readers + writers {
            let (client, inside, name) = (client.clone(), inside.clone(), name.to_owned());
            let read = task < readers;
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let lock = client
                        .lock(name.as_str())
                        .ttl(Duration::from_secs(5))
                        .wait(Duration::from_secs(60));
                    let result = match read {
                        true => lock.read().run(inside.read(read_hold)).await,
                        false => lock.run(inside.write(write_hold)).await,
                    };
                    result.expect("the lock within the wait, held throughout");
                }
            }));
        }
    }
    for handle in handles {
        handle.await.expect("a racer panicked");
    }
    inside
}

/// Six readers over `readers` (in turn) take `name` again as soon as they leave (80 ms inside
/// each), so the lock is never free of readers; `writer` then takes it three times (20 ms
/// inside), waiting each time for the readers to come back in after it. Returns how long each
/// write waited, and what was seen inside. A writer whose intent did not stop new readers
/// would wait forever (the waits are bounded by 10 s, then it panics).
pub async fn writer_behind_readers(
    readers: &[Client],
    writer: &Client,
    name: &str,
) -> (Vec<Duration>, Arc<Inside>) {
    let inside = Arc::new(Inside::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = readers[i % readers.len()].clone();
        let (inside, stop, name) = (inside.clone(), stop.clone(), name.to_owned());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(15 * i as u64)).await;
            while !stop.load(Ordering::SeqCst) {
                client
                    .lock(name.as_str())
                    .read()
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(30))
                    .run(inside.read(Duration::from_millis(80)))
                    .await
                    .expect("a reader gets in within its wait");
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        inside.readers.load(Ordering::SeqCst) > 0,
        "no reader inside"
    );
    let mut waits = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        writer
            .lock(name)
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(10))
            .run(async {
                waits.push(started.elapsed());
                inside.write(Duration::from_millis(20)).await;
            })
            .await
            .expect("the writer gets the lock");
        // The readers come back in after the writer.
        let reads = inside.reads.load(Ordering::SeqCst);
        crate::inspect::eventually(Duration::from_secs(5), "readers after the writer", || {
            let done = inside.reads.load(Ordering::SeqCst) > reads + 3;
            async move { done.then_some(()) }
        })
        .await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.expect("a reader panicked");
    }
    (waits, inside)
}
