//! Semaphores and shared (read) holds over RedLock (`Config::redlock`), against independent
//! `redis-server`s started by the testkit: at most `n` permit holders at once and `n` reached
//! (over 3 and 5 masters), the permit quorum `⌊n·m/(n+1)⌋ + 1` (2 permits over 5 masters: a
//! majority with room is not enough, one master down works, two fail with `NoQuorum`, and a
//! renewal by fewer masters is a loss), a
//! permit renewed past several ttls, readers overlapping and writers overlapping nobody, a
//! writer not starved by a stream of readers, one master of 3 down, acquires cancelled at any
//! point leaving nothing on any master, another count on one master as `PermitsMismatch`, and
//! fencing tokens increasing across holders.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Config, Error, LockGuard, LossReason};
use redis::AsyncCommands;
use testkit::{permit_race, read_write_race, writer_behind_readers, RedisServer};
use tokio::time::Instant;

/// How long a call's requests to the other masters (and background releases) may go on once
/// the call was decided.
const SETTLED: Duration = Duration::from_secs(3);

fn masters(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

async fn client(masters: &[RedisServer]) -> Client {
    Config::redlock(masters.iter().map(RedisServer::url))
        .response_timeout(Duration::from_millis(300))
        // Generous: a loaded machine starting many servers at once (killed masters refuse at
        // once; nothing here waits for a connect to time out).
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("a RedLock client")
}

async fn clients(masters: &[RedisServer], n: usize) -> Vec<Client> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(client(masters).await);
    }
    all
}

/// The keys of lock `name` on `master` (the lock or semaphore, a writer's intent, a queue),
/// its fence floor aside (kept for the fence retention by design).
async fn keys_of(master: &RedisServer, name: &str) -> Vec<String> {
    let prefix = format!("distlock:{{{name}}}");
    testkit::all_keys(&mut master.conn().await)
        .await
        .into_iter()
        .filter(|k| k.starts_with(&prefix) && !k.ends_with(":fence"))
        .collect()
}

/// Waits until no live master holds a key of `name` (see [`keys_of`]).
async fn nothing_left(masters: &[&RedisServer], name: &str) {
    testkit::eventually(SETTLED, "no key of the lock on any master", || async {
        for master in masters {
            if !keys_of(master, name).await.is_empty() {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_n_permit_holders_over_three_and_five_masters_and_n_reached() {
    for (nodes, permits) in [(3, 2), (5, 3)] {
        let masters = masters(nodes);
        let all = clients(&masters, 3).await;
        let name = format!("api:race{nodes}");
        let most = permit_race(&all, (3, 6), (&name, permits), Duration::from_millis(15)).await;
        assert_eq!(
            most, permits as usize,
            "{nodes} masters: never more than {permits} inside, and {permits} reached"
        );
        testkit::at_rest(&all.iter().collect::<Vec<_>>(), SETTLED).await;
        nothing_left(&masters.iter().collect::<Vec<_>>(), &name).await;
    }
}

#[tokio::test]
async fn two_permits_over_five_masters_need_four_of_them() {
    let mut masters = masters(5);
    let (a, b, c) = (
        client(&masters).await,
        client(&masters).await,
        client(&masters).await,
    );
    masters[2].kill();
    // One master down: 4 up, the quorum of 2 permits over 5 masters. Both permits are there.
    let first = a
        .semaphore("api:q", 2)
        .acquire()
        .await
        .expect("4 masters up");
    let second = b
        .semaphore("api:q", 2)
        .acquire()
        .await
        .expect("4 masters up");
    let third = c.semaphore("api:q", 2).acquire().await;
    assert!(matches!(third, Err(Error::Busy { .. })), "{third:?}");
    first.release().await.unwrap();
    second.release().await.unwrap();
    // Two down: a majority (3) is up, but not 4: no permit, waiting or not.
    masters[4].kill();
    testkit::expect_no_quorum(a.semaphore("api:q", 2).acquire().await, 4);
    let started = Instant::now();
    let waited = a
        .semaphore("api:q", 2)
        .wait(Duration::from_millis(600))
        .acquire()
        .await;
    testkit::expect_no_quorum(waited, 4);
    assert!(started.elapsed() < Duration::from_secs(3));
    // A lock still works there (a majority).
    let lock = a
        .lock("api:q-lock")
        .acquire()
        .await
        .expect("a majority is up");
    lock.release().await.unwrap();
    let live: Vec<&RedisServer> = [0, 1, 3].iter().map(|&i| &masters[i]).collect();
    testkit::at_rest(&[&a, &b, &c], SETTLED).await;
    nothing_left(&live, "api:q").await;
}

#[tokio::test]
async fn a_permit_is_renewed_past_several_ttls_and_lost_below_its_quorum() {
    let mut masters = masters(5);
    let (a, b, c) = (
        client(&masters).await,
        client(&masters).await,
        client(&masters).await,
    );
    let ttl = Duration::from_millis(800);
    let take = |client: &Client| client.semaphore("api:renew", 2).ttl(ttl).renew(true);
    let first = take(&a).acquire().await.unwrap();
    let second = take(&b).acquire().await.unwrap();
    tokio::time::sleep(ttl * 4).await;
    first.ensure_held().expect("renewed past 4 ttls");
    second.ensure_held().expect("renewed past 4 ttls");
    let third = c.semaphore("api:renew", 2).acquire().await;
    assert!(
        matches!(third, Err(Error::Busy { .. })),
        "both permits still held by their renewed holders: {third:?}"
    );
    // Two masters lose the holders (as a restarted master does): their renewals are renewed
    // by 3 masters, a majority but not the 4 a permit of 2 over 5 needs: both are told.
    for master in &masters[..2] {
        let mut conn = master.conn().await;
        let members: Vec<String> = conn.zrange("distlock:{api:renew}", 0, -1).await.unwrap();
        for member in members.iter().filter(|m| *m != "d2:permits") {
            let _: () = conn.zrem("distlock:{api:renew}", member).await.unwrap();
        }
    }
    let started = Instant::now();
    for guard in [&first, &second] {
        let lost = tokio::time::timeout(ttl * 2, guard.lost())
            .await
            .expect("a permit renewed by 3 of 5 masters is lost");
        assert_eq!(lost, LossReason::Expired);
    }
    eprintln!("both told after {:?}", started.elapsed());
    // Two masters down: a lock renewed by the other 3 is kept (a majority), a permit is not.
    masters[0].kill();
    masters[1].kill();
    let permit = c.semaphore("api:renew-free", 2).ttl(ttl).renew(true);
    testkit::expect_no_quorum(permit.acquire().await, 4);
    drop((first, second));
    // A lock renewed by the same 3 masters is kept.
    let lock = a
        .lock("api:renew-lock")
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ttl * 3).await;
    lock.ensure_held().expect("a lock needs a majority only");
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_overlap_and_writers_overlap_nobody_over_three_masters() {
    let masters = masters(3);
    let all = clients(&masters, 3).await;
    let (readers, writers, rounds) = (3, 1, 6);
    let holds = (Duration::from_millis(30), Duration::from_millis(5));
    let inside = read_write_race(&all, (readers, writers), ("doc:race", rounds), holds).await;
    let most = inside.most_readers.load(Ordering::SeqCst);
    eprintln!("at most {most} readers inside at once");
    assert!(
        !inside.overlap.load(Ordering::SeqCst),
        "a writer overlapped someone"
    );
    assert_eq!(inside.reads.load(Ordering::SeqCst), 3 * readers * rounds);
    assert_eq!(inside.writes.load(Ordering::SeqCst), 3 * writers * rounds);
    assert!(most >= 2, "readers share the lock: at most {most} at once");
    testkit::at_rest(&all.iter().collect::<Vec<_>>(), SETTLED).await;
    nothing_left(&masters.iter().collect::<Vec<_>>(), "doc:race").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers_over_redlock() {
    let masters = masters(3);
    let all = clients(&masters, 2).await;
    let writer = client(&masters).await;
    let (waits, inside) = writer_behind_readers(&all, &writer, "doc:stream").await;
    eprintln!("a writer behind a stream of readers (80 ms each) over 3 masters waited {waits:?}");
    assert!(
        !inside.overlap.load(Ordering::SeqCst),
        "a writer overlapped"
    );
    for waited in waits {
        // The readers inside when it came (80 ms each), and a few intent rounds at most.
        assert!(
            waited < Duration::from_millis(2500),
            "the writer waited {waited:?}"
        );
    }
}

#[tokio::test]
async fn reads_and_writes_work_with_one_of_three_masters_down() {
    let mut masters = masters(3);
    let (a, b, w) = (
        client(&masters).await,
        client(&masters).await,
        client(&masters).await,
    );
    masters[1].kill();
    let r1 = a
        .lock("doc:down")
        .read()
        .acquire()
        .await
        .expect("2 of 3 up");
    let r2 = b
        .lock("doc:down")
        .read()
        .acquire()
        .await
        .expect("readers share");
    let busy = w
        .lock("doc:down")
        .wait(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let write = w
        .lock("doc:down")
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("the readers left");
    let busy = a.lock("doc:down").read().acquire().await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    write.release().await.unwrap();
    // The first writer, which gave up, marked its intent: new readers wait it out (1 s).
    let read = a
        .lock("doc:down")
        .read()
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    read.release().await.unwrap();
    testkit::at_rest(&[&a, &b, &w], SETTLED).await;
    nothing_left(&[&masters[0], &masters[2]], "doc:down").await;
}

/// How an acquire of [`cancelled_acquires_leave_nothing_on_any_master`] takes the name.
#[derive(Clone, Copy, Debug)]
enum Take {
    Permit,
    Read,
    Write,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_acquires_leave_nothing_on_any_master() {
    let masters = masters(5);
    let all = clients(&masters, 3).await;
    for take in [Take::Permit, Take::Read, Take::Write] {
        let name = format!("cancel:{take:?}");
        let acquire = |client: &Client| {
            let lock = match take {
                Take::Permit => client.semaphore(name.as_str(), 2),
                Take::Read | Take::Write => client.lock(name.as_str()),
            };
            let lock = lock
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(5));
            match take {
                Take::Read => lock.read(),
                Take::Permit | Take::Write => lock,
            }
        };
        // A holder of the other side for a while, so that some acquires wait (a writer for
        // readers and a permit race, readers for a writer).
        let holder: Option<LockGuard> = match take {
            Take::Read => Some(all[0].lock(name.as_str()).acquire().await.unwrap()),
            Take::Write => Some(all[0].lock(name.as_str()).read().acquire().await.unwrap()),
            Take::Permit => None,
        };
        let mut handles = Vec::new();
        for i in 0..30u64 {
            let builder = acquire(&all[(i % 3) as usize]);
            // Cancelled after 0–29 ms: before, during and after the requests to the masters.
            let cancel_after = Duration::from_micros(i * 997 % 30_000);
            handles.push(tokio::spawn(async move {
                // A guard taken in time is dropped at once (released in the background).
                let _ = tokio::time::timeout(cancel_after, builder.acquire()).await;
            }));
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
        if let Some(holder) = holder {
            holder.release().await.unwrap();
        }
        for handle in handles {
            handle.await.unwrap();
        }
        testkit::at_rest(&all.iter().collect::<Vec<_>>(), Duration::from_secs(10)).await;
        // The ttl is 30 s: a key still there now was left behind, not waiting to expire.
        nothing_left(&masters.iter().collect::<Vec<_>>(), &name).await;
    }
}

#[tokio::test]
async fn another_count_on_one_master_is_a_permits_mismatch() {
    let masters = masters(3);
    let (a, b) = (client(&masters).await, client(&masters).await);
    let held = a.semaphore("api:count", 2).acquire().await.unwrap();
    let other = b.semaphore("api:count", 3).acquire().await;
    assert!(
        matches!(
            other,
            Err(Error::PermitsMismatch {
                asked: 3,
                held: 2,
                ..
            })
        ),
        "{other:?}"
    );
    held.release().await.unwrap();
    // One master alone holds a live holder that took the semaphore with 5: its count wins over
    // the two masters that would grant 2 (users must agree on the count).
    let mut conn = masters[0].conn().await;
    let (secs, micros): (String, String) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let now_ms = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
    let key = "distlock:{api:count}";
    let _: () = conn
        .zadd_multiple(
            key,
            &[(-5, "d2:permits"), (now_ms as i64 + 60_000, "d2:someone")],
        )
        .await
        .unwrap();
    let _: () = conn.pexpire(key, 60_000).await.unwrap();
    let found = a.semaphore("api:count", 2).acquire().await;
    assert!(
        matches!(
            found,
            Err(Error::PermitsMismatch {
                asked: 2,
                held: 5,
                ..
            })
        ),
        "{found:?}"
    );
    // What the other two masters granted is released again.
    testkit::at_rest(&[&a, &b], SETTLED).await;
    nothing_left(&[&masters[1], &masters[2]], "api:count").await;
}

#[tokio::test]
async fn fenced_permits_and_reads_get_increasing_tokens_across_holders() {
    let masters = masters(5);
    let all = clients(&masters, 3).await;
    let mut tokens = Vec::new();
    for round in 0..6 {
        let client = &all[round % 3];
        let guard = match round % 2 {
            0 => client.semaphore("fence:k", 2).fenced(true).acquire().await,
            _ => client.lock("fence:r").read().fenced(true).acquire().await,
        }
        .unwrap();
        tokens.push((round % 2, guard.token().expect("fenced")));
        guard.release().await.unwrap();
    }
    for kind in 0..2 {
        let of: Vec<u64> = tokens.iter().filter(|t| t.0 == kind).map(|t| t.1).collect();
        assert!(of.windows(2).all(|w| w[0] < w[1]), "{of:?}");
    }
    // A writer after readers: above theirs.
    let read = all[0]
        .lock("fence:r")
        .read()
        .fenced(true)
        .acquire()
        .await
        .unwrap();
    let read_token = read.token().unwrap();
    read.release().await.unwrap();
    let write = all[1].lock("fence:r").fenced(true).acquire().await.unwrap();
    assert!(write.token().unwrap() > read_token);
    write.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_taken_at_once_never_share_a_fencing_token() {
    let masters = masters(5);
    let all = clients(&masters, 3).await;
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for client in &all {
        for _ in 0..3 {
            let (client, tokens) = (client.clone(), tokens.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let guard = client
                        .semaphore("fence:many", 3)
                        .fenced(true)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .expect("a permit within the wait");
                    tokens.lock().unwrap().push(guard.token().expect("fenced"));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let mut tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 3 * 3 * 5);
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 3 * 3 * 5, "two permits got the same token");
}

#[tokio::test]
async fn a_permit_granted_by_a_majority_only_is_not_taken() {
    // 2 permits over 5 masters, two holders spread as a majority rule would have let them in:
    // one on masters 0, 1, 2, the other on 0, 1, 3. Masters 2, 3 and 4 still have room, a
    // majority: a third holder there would make 3 holders of 2 permits. It needs 4.
    let masters = masters(5);
    let key = "distlock:{api:spread}";
    for (i, master) in masters.iter().enumerate() {
        let holders: &[&str] = match i {
            0 | 1 => &["d2:h1", "d2:h2"],
            2 => &["d2:h1"],
            3 => &["d2:h2"],
            _ => &[],
        };
        if holders.is_empty() {
            continue;
        }
        let mut conn = master.conn().await;
        let (secs, _): (String, String) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let until = secs.parse::<i64>().unwrap() * 1000 + 60_000;
        let mut members = vec![(-2, "d2:permits")];
        members.extend(holders.iter().map(|h| (until, *h)));
        let _: () = conn.zadd_multiple(key, &members).await.unwrap();
        let _: () = conn.pexpire(key, 60_000).await.unwrap();
    }
    let c = client(&masters).await;
    let found = c.semaphore("api:spread", 2).acquire().await;
    assert!(matches!(found, Err(Error::Busy { .. })), "{found:?}");
    // What masters 2, 3 and 4 granted is released again.
    testkit::at_rest(&[&c], SETTLED).await;
    nothing_left(&[&masters[4]], "api:spread").await;
    for master in &masters[2..4] {
        let members: Vec<String> = master.conn().await.zrange(key, 0, -1).await.unwrap();
        assert_eq!(
            members.len(),
            2,
            "the count and the one holder: {members:?}"
        );
    }
}
