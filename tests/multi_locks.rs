//! Sets of locks taken together (`distlock::lock_all`, `key = [...]`) against real servers:
//! all or none (a busy lock leaves the others free), one value on every lock, ledger
//! transfers between accounts in random key order (and `from == to`) conserving the total
//! without deadlock across tasks, clients and processes, on one server, a Redis Cluster (locks
//! on different slots) and a RedLock quorum; the loss of any lock cancels the body; renewal
//! extends every lock; a cancelled acquire leaves nothing held; fenced tokens per lock;
//! re-entry; the kinds; `min_hold`; the attribute's key list. Holders and racers in other
//! processes (`SIGKILL`, `SIGSTOP`, transfers across processes) are in `multi_lock_processes.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Client, Config, Error};
use redis::AsyncCommands;
use testkit::{quick_client as client, RedisCluster, RedisServer};
use tokio::time::Instant;

fn key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// A tiny random source (no dependency): xorshift seeded per task.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Balances kept in this process, read and written with a yield in between: a transfer that
/// ran without exclusion over both accounts loses money.
type Ledger = Arc<Mutex<HashMap<u64, i64>>>;

const ACCOUNTS: u64 = 5;
const START: i64 = 1000;

fn ledger() -> Ledger {
    Arc::new(Mutex::new((0..ACCOUNTS).map(|a| (a, START)).collect()))
}

/// `tasks` tasks per client each make `rounds` transfers between random accounts (naming the
/// two locks in random order, `from == to` now and then) under `lock_all`; returns how many
/// were made.
async fn transfers(
    clients: &[Client],
    tasks: usize,
    rounds: usize,
    ledger: &Ledger,
    prefix: &str,
) -> usize {
    let mut handles = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..tasks {
            let (client, ledger, prefix) = (client.clone(), ledger.clone(), prefix.to_owned());
            let mut rng = Rng(0x9e37_79b9 + (c * 100 + t) as u64 * 7919);
            handles.push(tokio::spawn(async move {
                let mut done = 0;
                for _ in 0..rounds {
                    let from = rng.below(ACCOUNTS);
                    let to = rng.below(ACCOUNTS);
                    let amount = rng.below(50) as i64;
                    let (a, b) = (format!("{prefix}:{from}"), format!("{prefix}:{to}"));
                    let names = match rng.below(2) {
                        0 => [a, b],
                        _ => [b, a],
                    };
                    let ledger = ledger.clone();
                    client
                        .lock_all(names)
                        .ttl(Duration::from_secs(5))
                        .wait(Duration::from_secs(60))
                        .run(async move {
                            let (f, t) = {
                                let l = ledger.lock().unwrap();
                                (l[&from], l[&to])
                            };
                            tokio::task::yield_now().await;
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            let mut l = ledger.lock().unwrap();
                            if from == to {
                                l.insert(from, f);
                            } else {
                                l.insert(from, f - amount);
                                l.insert(to, t + amount);
                            }
                        })
                        .await
                        .expect("both accounts within the wait, held throughout");
                    done += 1;
                }
                done
            }));
        }
    }
    let mut done = 0;
    for handle in handles {
        done += tokio::time::timeout(Duration::from_secs(120), handle)
            .await
            .expect("no deadlock: the transfers finish")
            .expect("a transfer task panicked");
    }
    done
}

fn total(ledger: &Ledger) -> i64 {
    ledger.lock().unwrap().values().sum()
}

#[tokio::test]
async fn a_set_is_taken_whole_or_not_at_all() {
    let server = RedisServer::start();
    let (c, other) = (client(&server).await, client(&server).await);
    let b = other.lock("acct:b").acquire().await.unwrap();
    let err = c
        .lock_all(["acct:a", "acct:b"])
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Busy { key, .. } if key == "acct:b"),
        "{err}"
    );
    let mut conn = server.conn().await;
    assert!(
        !conn.exists::<_, bool>(key("acct:a")).await.unwrap(),
        "a busy set leaves its free locks free"
    );
    b.release().await.unwrap();
    let guard = c.lock_all(["acct:b", "acct:a"]).acquire().await.unwrap();
    assert_eq!(guard.names().collect::<Vec<_>>(), ["acct:a", "acct:b"]);
    let (va, vb): (String, String) = (
        conn.get(key("acct:a")).await.unwrap(),
        conn.get(key("acct:b")).await.unwrap(),
    );
    assert_eq!(va, vb, "one value for the whole set");
    assert!(va.starts_with("d2:"), "{va}");
    // Each lock of the set is a plain lock to everyone else.
    assert!(other.lock("acct:a").acquire().await.unwrap_err().is_busy());
    assert!(other.lock("acct:b").acquire().await.unwrap_err().is_busy());
    guard.release().await.unwrap();
    assert!(!conn.exists::<_, bool>(key("acct:a")).await.unwrap());
    assert!(!conn.exists::<_, bool>(key("acct:b")).await.unwrap());
}

#[tokio::test]
async fn the_same_name_twice_is_one_lock_and_sets_are_checked() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c.lock_all(["acct:s", "acct:s"]).acquire().await.unwrap();
    assert_eq!(guard.names().collect::<Vec<_>>(), ["acct:s"]);
    guard.release().await.unwrap();
    let none: [&str; 0] = [];
    let err = c.lock_all(none).acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    let err = c.lock_all(["x", "y"]).read().acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    // A semaphore of one of the names: not a lock.
    let permit = c.semaphore("acct:sem", 2).acquire().await.unwrap();
    let err = c
        .lock_all(["acct:t", "acct:sem"])
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Incompatible { key } if key == "acct:sem"),
        "{err}"
    );
    permit.release().await.unwrap();
    // Readers of one of the names: busy, never incompatible.
    let reader = c.lock("acct:r").read().acquire().await.unwrap();
    let err = c
        .lock_all(["acct:t", "acct:r"])
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    reader.release().await.unwrap();
    let mut conn = server.conn().await;
    assert!(!conn.exists::<_, bool>(key("acct:t")).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_conserve_the_total_without_deadlock() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let ledger = ledger();
    let started = Instant::now();
    let done = transfers(&clients, 4, 40, &ledger, "acct").await;
    eprintln!(
        "{done} transfers over {ACCOUNTS} accounts in {:?}; total {}",
        started.elapsed(),
        total(&ledger)
    );
    assert_eq!(done, 2 * 4 * 40);
    assert_eq!(total(&ledger), START * ACCOUNTS as i64);
    for a in 0..ACCOUNTS {
        testkit::eventually(Duration::from_secs(2), "every lock released", || async {
            let mut conn = server.conn().await;
            let held: bool = conn.exists(key(&format!("acct:{a}"))).await.unwrap();
            (!held).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn a_waiting_set_is_woken_by_the_release() {
    let server = RedisServer::start();
    let (c, other) = (client(&server).await, client(&server).await);
    let b = other
        .lock("acct:w2")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = c
            .lock_all(["acct:w1", "acct:w2"])
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        (started.elapsed(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut conn = server.conn().await;
    assert!(
        !conn.exists::<_, bool>(key("acct:w1")).await.unwrap(),
        "a waiting set holds nothing"
    );
    let released = Instant::now();
    b.release().await.unwrap();
    let (waited, guard) = waiter.await.unwrap();
    let after = released.elapsed();
    eprintln!("set waiter took the locks {after:?} after the release (waited {waited:?})");
    assert!(
        after < Duration::from_secs(2),
        "woken, not polled: {after:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_acquire_leaves_nothing_held() {
    let server = RedisServer::start();
    let (c, other) = (client(&server).await, client(&server).await);
    let b = other.lock("acct:c2").acquire().await.unwrap();
    let waiting = c
        .lock_all(["acct:c1", "acct:c2", "acct:c3"])
        .wait(Duration::from_secs(20))
        .acquire();
    assert!(tokio::time::timeout(Duration::from_millis(200), waiting)
        .await
        .is_err());
    b.release().await.unwrap();
    c.settle().await;
    let mut conn = server.conn().await;
    for name in ["acct:c1", "acct:c2", "acct:c3"] {
        assert!(!conn.exists::<_, bool>(key(name)).await.unwrap(), "{name}");
    }
    // And dropped right after sending its attempt (the attempt may be applied).
    for _ in 0..20 {
        let fut = c.lock_all(["acct:c1", "acct:c3"]).acquire();
        let _ = tokio::time::timeout(Duration::from_micros(50), fut).await;
    }
    testkit::eventually(Duration::from_secs(3), "nothing left held", || async {
        let mut conn = server.conn().await;
        let a: bool = conn.exists(key("acct:c1")).await.unwrap();
        let b: bool = conn.exists(key("acct:c3")).await.unwrap();
        (!a && !b).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_loss_of_any_lock_cancels_the_body() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let deleter = {
        let mut conn = server.conn().await;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _: () = conn.del(key("acct:l2")).await.unwrap();
        })
    };
    let started = Instant::now();
    let result = c
        .lock_all(["acct:l1", "acct:l2"])
        .ttl(Duration::from_millis(600))
        .renew(true)
        .run(async {
            tokio::time::sleep(Duration::from_secs(10)).await;
        })
        .await;
    deleter.await.unwrap();
    assert!(
        matches!(result, Err(Error::Lost { .. })),
        "{result:?} after {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    c.settle().await;
    assert!(!conn.exists::<_, bool>(key("acct:l1")).await.unwrap());
}

#[tokio::test]
async fn renewal_extends_every_lock_and_a_stall_is_lost() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let ttl = Duration::from_millis(600);
    let guard = c
        .lock_all(["acct:r1", "acct:r2", "acct:r3"])
        .ttl(ttl)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ttl * 3).await;
    guard.ensure_held().unwrap();
    let mut conn = server.conn().await;
    for name in ["acct:r1", "acct:r2", "acct:r3"] {
        let pttl: i64 = conn.pttl(key(name)).await.unwrap();
        assert!(pttl > 0, "{name}: {pttl}");
    }
    guard.release().await.unwrap();
    // Without renewal the set's lease ends at its ttl.
    let result = c
        .lock_all(["acct:r1", "acct:r2"])
        .ttl(Duration::from_millis(300))
        .run(tokio::time::sleep(Duration::from_secs(2)))
        .await;
    assert!(matches!(result, Err(Error::Lost { .. })), "{result:?}");
}

#[tokio::test]
async fn fenced_sets_have_a_token_per_lock_strictly_increasing() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut last: HashMap<&str, u64> = HashMap::new();
    for round in 0..5 {
        let names = match round % 2 {
            0 => ["acct:f1", "acct:f2"],
            _ => ["acct:f2", "acct:f1"],
        };
        let guard = c.lock_all(names).fenced(true).acquire().await.unwrap();
        for name in ["acct:f1", "acct:f2"] {
            let token = guard.token_of(name).expect("a token per lock");
            if let Some(&before) = last.get(name) {
                assert!(token > before, "{name}: {token} after {before}");
            }
            last.insert(name, token);
        }
        assert_eq!(guard.token(), guard.token_of("acct:f1"));
        guard.release().await.unwrap();
        // A lock of one of the names alone continues the same sequence.
        let one = c.lock("acct:f2").fenced(true).acquire().await.unwrap();
        assert!(one.token().unwrap() > last["acct:f2"]);
        last.insert("acct:f2", one.token().unwrap());
        one.release().await.unwrap();
    }
    let tokens = c
        .lock_all(["acct:f1", "acct:f2"])
        .fenced(true)
        .run(async {
            (
                distlock::fencing_token_of("acct:f1"),
                distlock::fencing_token_of("acct:f2"),
                distlock::fencing_token_of("acct:other"),
            )
        })
        .await
        .unwrap();
    assert!(tokens.0.unwrap() > last["acct:f1"] && tokens.1.unwrap() > last["acct:f2"]);
    assert_eq!(tokens.2, None);
    // One lock of a fenced set re-entered alone has that lock's own token (its floor raised
    // far above the other's, so the two differ).
    let mut conn = server.conn().await;
    let high = tokens.1.unwrap() + 1_000_000_000;
    let _: () = conn
        .set(format!("{}:fence", key("acct:f2")), high)
        .await
        .unwrap();
    let inner = c.clone();
    c.lock_all(["acct:f1", "acct:f2"])
        .fenced(true)
        .run(async move {
            let one = inner.lock("acct:f2").fenced(true).acquire().await.unwrap();
            assert!(one.is_reentry());
            assert_eq!(one.token(), distlock::fencing_token_of("acct:f2"));
            assert!(one.token().unwrap() > high);
            assert!(distlock::fencing_token_of("acct:f1").unwrap() < high);
            // The re-entry names the lock it was asked for, and its fence is that lock's
            // name with that lock's token (a fence naming `acct:f1` with `acct:f2`'s token
            // would check the wrong watermark).
            assert_eq!(one.name(), "acct:f2");
            let fence = one.fence().expect("fenced");
            assert_eq!(
                (fence.name(), fence.token()),
                ("acct:f2", one.token().unwrap())
            );
            one.release().await.unwrap();
            // So does the body of a re-entry run under it: `fence()` is the innermost lock's.
            let body = inner
                .lock("acct:f2")
                .fenced(true)
                .run(async { distlock::fence() })
                .await
                .unwrap()
                .expect("the body's fence");
            assert_eq!(body.name(), "acct:f2");
            assert_eq!(Some(body.token()), distlock::fencing_token_of("acct:f2"));
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn re_entry_inside_a_set() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let inner = c.clone();
    c.lock_all(["acct:e1", "acct:e2"])
        .run(async move {
            let one = inner.lock("acct:e2").acquire().await.unwrap();
            assert!(one.is_reentry());
            one.release().await.unwrap();
            let same = inner
                .lock_all(["acct:e2", "acct:e1"])
                .acquire()
                .await
                .unwrap();
            assert!(same.is_reentry());
            same.release().await.unwrap();
            let err = inner
                .lock_all(["acct:e1", "acct:e3"])
                .acquire()
                .await
                .unwrap_err();
            assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn min_hold_keeps_every_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .lock_all(["acct:m1", "acct:m2"])
        .min_hold(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
    let err = c
        .lock_all(["acct:m2", "acct:m1"])
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    let mut conn = server.conn().await;
    let pttl: i64 = conn.pttl(key("acct:m1")).await.unwrap();
    assert!(pttl > 1000, "{pttl}");
}

// --- Cluster and RedLock ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_cluster_sets_across_slots_conserve_the_total_without_deadlock() {
    let cluster = RedisCluster::start(3, 0);
    let clients = cluster.clients(2).await;
    // The accounts' names hash to different slots (and masters).
    let slots: Vec<u16> = (0..ACCOUNTS)
        .map(|a| distlock::hash_slot(format!("distlock:{{cacct:{a}}}").as_bytes()))
        .collect();
    assert!(slots.windows(2).any(|w| w[0] != w[1]), "{slots:?}");
    let ledger = ledger();
    let started = Instant::now();
    let done = transfers(&clients, 3, 20, &ledger, "cacct").await;
    eprintln!(
        "cluster: {done} transfers in {:?}; total {}",
        started.elapsed(),
        total(&ledger)
    );
    assert_eq!(done, 2 * 3 * 20);
    assert_eq!(total(&ledger), START * ACCOUNTS as i64);
    // A busy later group releases the earlier ones: nothing of the set is left held. (The
    // transfers' last releases were sent without waiting, `run`'s way: answered first.)
    for c in &clients {
        c.settle().await;
    }
    let c = &clients[0];
    let names: Vec<String> = (0..ACCOUNTS).map(|a| format!("cacct:{a}")).collect();
    let last = {
        let guard = c.lock_all(names.clone()).acquire().await.unwrap();
        let last = guard.names().last().unwrap().to_owned();
        guard.release().await.unwrap();
        last
    };
    let held = clients[1].lock(last.as_str()).acquire().await.unwrap();
    let err = c.lock_all(names.clone()).acquire().await.unwrap_err();
    assert!(
        matches!(&err, Error::Busy { key, .. } if *key == last),
        "{err}"
    );
    for name in names.iter().filter(|n| **n != last) {
        let one = clients[1].lock(name.as_str()).acquire().await;
        assert!(one.is_ok(), "{name} left held: {one:?}");
        one.unwrap().release().await.unwrap();
    }
    // A waiting acquire cancelled (its earlier slot groups taken and released again while it
    // waits), and acquires dropped at random points of their slot groups: nothing left held.
    let waiting = c
        .lock_all(names.clone())
        .wait(Duration::from_secs(20))
        .acquire();
    assert!(tokio::time::timeout(Duration::from_millis(300), waiting)
        .await
        .is_err());
    held.release().await.unwrap();
    for i in 0..30u64 {
        let fut = c.lock_all(names.clone()).acquire();
        let _ = tokio::time::timeout(Duration::from_micros(100 + i * 37), fut).await;
    }
    c.settle().await;
    for name in &names {
        let one = testkit::eventually(Duration::from_secs(3), "nothing left held", || async {
            clients[1].lock(name.as_str()).acquire().await.ok()
        })
        .await;
        one.release().await.unwrap();
    }
}

/// A set across slot groups does not queue in Redis (`ACQUIRE_ALL` without the queue's keys):
/// it marks the lock it finds held, so that lock's release publishes and wakes it (a release
/// of a lock nobody marked sends no message: `tests/waiter_marks.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_set_across_slots_is_woken_by_the_release() {
    let cluster = RedisCluster::start(3, 0);
    let clients = cluster.clients(2).await;
    let names = ["xs:0", "xs:1", "xs:2", "xs:3"];
    let slot = |name: &str| distlock::hash_slot(key(name).as_bytes());
    let (first, other) = (names[0], names.iter().find(|n| slot(n) != slot(names[0])));
    let other = *other.expect("two of the names in different slots");
    let held = clients[1]
        .lock(other)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let c = clients[0].clone();
    let waiter = tokio::spawn(async move {
        c.lock_all([first, other])
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap()
    });
    // The set's attempt found `other` held and marked it (`d2:<owner>+`).
    let conn = cluster
        .node(cluster.master_of_slot(slot(other)))
        .conn()
        .await;
    testkit::eventually(Duration::from_secs(5), "the set marks the lock", || {
        let mut conn = conn.clone();
        async move {
            let value: Option<String> = conn.get(key(other)).await.unwrap();
            value.filter(|v| v.ends_with('+')).map(|_| ())
        }
    })
    .await;
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = waiter.await.unwrap();
    let after = released.elapsed();
    assert!(
        after < Duration::from_secs(2),
        "woken, not left to the 30 s lease: {after:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_redlock_sets_conserve_the_total_and_are_all_or_none() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let connect = || async {
        Config::redlock(masters.iter().map(RedisServer::url))
            .connect()
            .await
            .unwrap()
    };
    let clients = [connect().await, connect().await];
    let ledger = ledger();
    let done = transfers(&clients, 3, 15, &ledger, "racct").await;
    assert_eq!(done, 2 * 3 * 15);
    assert_eq!(total(&ledger), START * ACCOUNTS as i64);
    let held = clients[1].lock("racct:1").acquire().await.unwrap();
    let err = clients[0]
        .lock_all(["racct:0", "racct:1"])
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    for master in &masters {
        let mut conn = master.conn().await;
        assert!(!conn.exists::<_, bool>(key("racct:0")).await.unwrap());
    }
    held.release().await.unwrap();
    let err = clients[0]
        .lock_all(["racct:0", "racct:1"])
        .fenced(true)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
}

// --- The attribute --------------------------------------------------------------------------

#[derive(Debug)]
enum LedgerError {
    /// Read by the test's `expect` (through `Debug`).
    #[allow(dead_code)]
    Lock(Error),
}

impl From<Error> for LedgerError {
    fn from(error: Error) -> Self {
        LedgerError::Lock(error)
    }
}

static BOOK: Mutex<Vec<i64>> = Mutex::new(Vec::new());

#[distlock::distributed_lock(key = ["book:<from>", "book:<to>"], ttl = "5s", wait = "30s", fenced, client = "multi-attr")]
async fn book_transfer(from: usize, to: usize, amount: i64) -> Result<(u64, u64), LedgerError> {
    let (f, t) = {
        let book = BOOK.lock().unwrap();
        (book[from], book[to])
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    {
        let mut book = BOOK.lock().unwrap();
        if from != to {
            book[from] = f - amount;
            book[to] = t + amount;
        }
    }
    let token = |n: usize| distlock::fencing_token_of(&format!("book:{n}")).unwrap();
    Ok((token(from), token(to)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_attribute_takes_a_key_list() {
    let server = RedisServer::start();
    Config::new(server.url())
        .install_as("multi-attr")
        .await
        .unwrap();
    *BOOK.lock().unwrap() = vec![100; 4];
    let mut tasks = Vec::new();
    for t in 0..6u64 {
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(t * 977 + 3);
            for _ in 0..15 {
                let (from, to) = (rng.below(4) as usize, rng.below(4) as usize);
                let (a, b) = book_transfer(from, to, 7).await.expect("transferred");
                assert!(a > 0 && b > 0);
                if from == to {
                    assert_eq!(a, b, "from == to is one lock, one token");
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(BOOK.lock().unwrap().iter().sum::<i64>(), 400);
}
