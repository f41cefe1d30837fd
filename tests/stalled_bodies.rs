//! A body is never polled after its hold is lost: the process holding it is stopped (`SIGSTOP`)
//! past the lease, many times, and every poll of the body that finds its hold no longer
//! guaranteed is counted (it must be none) — for a leader's body (`LeaderBuilder::run`), an
//! annotated function's and a `LockBuilder::run` body.
//!
//! The holder is a child process (this test binary run again). Its body wakes every 20 ms,
//! asks whether its hold is still guaranteed (`Leadership::ensure_held`, or
//! `distlock::ensure_held()` inside a locked body), prints `late` if not, then `tick`. The
//! parent stops the child right after a `tick` (so the stop lands while the body sleeps, not
//! between `run`'s look at the loss and the body's own), keeps it stopped for more than two
//! ttls, lets it go, and waits for the body of the next hold to start. When the child wakes,
//! both the body's timer and the lease's deadline have passed: `run` must look at the loss
//! first and drop the body without polling it.

use std::time::Duration;

use distlock::{distributed_lock, Config};
use testkit::{ChildTest, RedisServer};

/// The child's role: `<mode> <redis url>`.
const ROLE: &str = "DISTLOCK_STALLED_BODY";

/// The holder's lease.
const TTL: Duration = Duration::from_millis(300);

/// How long the child is stopped each time: past the lease, with room to spare.
const STOPPED: Duration = Duration::from_millis(800);

/// Stops per mode.
const STALLS: usize = 12;

/// The body's tick.
const TICK: Duration = Duration::from_millis(20);

/// One body's loop: wakes every tick, counts the polls whose hold is gone (`held` is how the
/// body asks), never returns.
async fn ticking(held: impl Fn() -> Result<(), distlock::Error>) {
    println!("start");
    loop {
        tokio::time::sleep(TICK).await;
        if let Err(error) = held() {
            println!("late: {error}");
        }
        println!("tick");
    }
}

#[distributed_lock(key = "stalled:attribute", ttl = "300ms", renew)]
async fn attributed() -> Result<(), distlock::Error> {
    ticking(distlock::ensure_held).await;
    Ok(())
}

/// The child: holds in its mode, again and again, until killed.
#[tokio::test]
async fn stalled_body_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let (mode, url) = role.split_once(' ').expect("`<mode> <url>`");
    let client = Config::new(url)
        .response_timeout(Duration::from_millis(500))
        .install()
        .await
        .expect("install the default client");
    loop {
        match mode {
            "leader" => {
                let _ = client
                    .leader("stalled:leader")
                    .ttl(TTL)
                    .run(|leadership| async move {
                        ticking(|| leadership.ensure_held()).await;
                    })
                    .await;
            }
            "attribute" => {
                let _ = attributed().await;
            }
            "run" => {
                let _ = client
                    .lock("stalled:run")
                    .ttl(TTL)
                    .renew(true)
                    .run(ticking(distlock::ensure_held))
                    .await;
            }
            other => panic!("no mode {other}"),
        }
    }
}

/// Stops the child in `mode` [`STALLS`] times past its lease; returns the polls of a body that
/// found its hold gone.
async fn late_polls(mode: &str) -> Vec<String> {
    let server = RedisServer::start();
    let mut child = ChildTest::spawn(
        "stalled_body_child",
        (ROLE, format!("{mode} {}", server.url())),
    );
    let mut late = Vec::new();
    child.expect("start", Duration::from_secs(10)).await;
    for stall in 0..STALLS {
        wait_for(&mut child, "tick", &mut late).await;
        child.signal("STOP");
        tokio::time::sleep(STOPPED).await;
        child.signal("CONT");
        wait_for(&mut child, "start", &mut late).await;
        assert!(
            late.is_empty(),
            "{mode}: the body was polled after its hold was lost (stall {stall}): {late:?}"
        );
    }
    late
}

/// Reads the child's lines until one contains `text`, keeping every `late` line.
async fn wait_for(child: &mut ChildTest, text: &str, late: &mut Vec<String>) {
    loop {
        let line = child
            .next_line(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("the child ended before `{text}`"));
        if line.starts_with("late") {
            late.push(line.clone());
        }
        if line.contains(text) {
            return;
        }
    }
}

#[tokio::test]
async fn a_leaders_body_is_never_polled_after_a_stall() {
    assert_eq!(late_polls("leader").await, Vec::<String>::new());
}

#[tokio::test]
async fn an_annotated_functions_body_is_never_polled_after_a_stall() {
    assert_eq!(late_polls("attribute").await, Vec::<String>::new());
}

#[tokio::test]
async fn a_run_body_is_never_polled_after_a_stall() {
    assert_eq!(late_polls("run").await, Vec::<String>::new());
}
