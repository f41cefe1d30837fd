//! A delay line between a client and a server on 127.0.0.1: every byte reaches the other side
//! a fixed time after it was sent, in both directions, as between two hosts — the round trip
//! grows by twice the delay and nothing else changes (pipelined requests stay pipelined: a
//! request sent while an earlier one is on its way is not held behind it).
//!
//! The benchmarks measure through it what one round trip and the group commit buy where
//! services run (`BENCH_DELAY_US`). Its threads sleep with the OS's timer (tens of
//! microseconds late at most), not tokio's, whose millisecond wheel would round a 250 µs delay
//! up to a millisecond or more.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// A running delay line; stops accepting when dropped (open connections end with their
/// client or server).
pub struct DelayProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    held: Arc<AtomicBool>,
}

impl DelayProxy {
    /// Starts a delay line to `upstream` on a free loopback port: each direction delays its
    /// bytes by `delay` (a round trip grows by `2 * delay`).
    pub fn start(upstream: SocketAddr, delay: Duration) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the delay line");
        let addr = listener.local_addr().expect("the delay line's address");
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let held = Arc::new(AtomicBool::new(false));
        let (stop_flag, count, hold) = (stop.clone(), accepted.clone(), held.clone());
        thread::Builder::new()
            .name("delay-accept".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if stop_flag.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    count.fetch_add(1, Ordering::Relaxed);
                    let Ok(server) = TcpStream::connect(upstream) else {
                        continue; // dropping `client` closes it
                    };
                    connect_both_ways(client, server, delay, &hold);
                }
            })
            .expect("spawn the delay line's acceptor");
        DelayProxy {
            addr,
            stop,
            accepted,
            held,
        }
    }

    /// Starts a delay line to `server`.
    pub fn to(server: &crate::server::RedisServer, delay: Duration) -> DelayProxy {
        DelayProxy::start(SocketAddr::from(([127, 0, 0, 1], server.port())), delay)
    }

    /// The delay line's own address (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// While on, nothing is delivered in either direction: what was read is kept, in order,
    /// and delivered once it is off (or dropped with its connection). Bytes still on their
    /// way when it is turned on (read less than the delay ago) are held too: a replica behind
    /// a delay line does not get the writes of the last `delay` before a hold.
    pub fn hold(&self, on: bool) {
        self.held.store(on, Ordering::Release);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Held bytes go (or fail with their connection), so no writer waits on.
        self.held.store(false, Ordering::Release);
        // Wakes the acceptor so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Two delayed directions between `client` and `server`, held while `held` is on.
fn connect_both_ways(
    client: TcpStream,
    server: TcpStream,
    delay: Duration,
    held: &Arc<AtomicBool>,
) {
    for stream in [&client, &server] {
        let _ = stream.set_nodelay(true);
    }
    let (Ok(client_rd), Ok(server_rd)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    one_way(client_rd, server, delay, held.clone());
    one_way(server_rd, client, delay, held.clone());
}

/// Bytes read from `from` are written to `to` `delay` after they arrived (and not while `held`
/// is on): a reader thread stamps each chunk, a writer thread holds it until its time.
fn one_way(mut from: TcpStream, mut to: TcpStream, delay: Duration, held: Arc<AtomicBool>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .expect("spawn a delay line thread");
    };
    spawn(
        "delay-read",
        Box::new(move || {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                match from.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send((Instant::now(), chunk[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
            // Dropping `tx` ends the writer once it has delivered what was read.
        }),
    );
    spawn(
        "delay-write",
        Box::new(move || {
            while let Ok((read_at, bytes)) = rx.recv() {
                let due = read_at + delay;
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                }
                while held.load(Ordering::Acquire) {
                    thread::sleep(Duration::from_millis(1));
                }
                if to.write_all(&bytes).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback: what a delay line is put in front of.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn a_round_trip_grows_by_twice_the_delay_and_pipelined_bytes_are_not_held_back() {
        let delay = Duration::from_millis(20);
        let proxy = DelayProxy::start(echo(), delay);
        let mut conn = TcpStream::connect(proxy.addr).unwrap();
        conn.set_nodelay(true).unwrap();
        let mut buf = [0u8; 1];
        let started = Instant::now();
        conn.write_all(b"a").unwrap();
        conn.read_exact(&mut buf).unwrap();
        let one = started.elapsed();
        assert!(one >= delay * 2, "{one:?}");
        assert!(one < delay * 2 + Duration::from_millis(15), "{one:?}");
        // Ten bytes sent 2 ms apart: all back within one round trip of the last, not ten.
        let started = Instant::now();
        for _ in 0..10 {
            conn.write_all(b"b").unwrap();
            thread::sleep(Duration::from_millis(2));
        }
        let mut back = [0u8; 10];
        conn.read_exact(&mut back).unwrap();
        let ten = started.elapsed();
        assert!(ten < delay * 2 + Duration::from_millis(35), "{ten:?}");
        assert_eq!(proxy.accepted(), 1);
    }

    #[test]
    fn a_hold_keeps_what_was_on_its_way_until_it_is_let_go() {
        let delay = Duration::from_millis(20);
        let proxy = DelayProxy::start(echo(), delay);
        let mut conn = TcpStream::connect(proxy.addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        conn.write_all(b"a").unwrap();
        // Within the delay: the byte is on its way when the hold starts.
        proxy.hold(true);
        let mut buf = [0u8; 1];
        assert!(conn.read_exact(&mut buf).is_err(), "delivered while held");
        proxy.hold(false);
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"a");
    }
}
