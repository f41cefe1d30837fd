//! A fault-injecting TCP proxy between a client and Redis, on 127.0.0.1.
//!
//! It understands just enough RESP to count commands and replies, so it can act on the reply
//! to one specific command: drop it (the connection stays open), delay it, or reset the
//! connection instead of delivering it. It can also add latency to every request, black-hole
//! all traffic (a partition: nothing passes and nothing is closed; like TCP, the stalled bytes
//! are delivered once it heals), and reset every connection (RST).
//!
//! Replies are matched to commands in order, per connection, which holds on a command
//! connection (one reply per command, pipelined commands included). Push frames (`>`) are
//! passed through and not counted; rules should match commands that are only sent on command
//! connections (e.g. `EVALSHA`, or the plain acquire's `SET ... NX ... GET`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// The mutex's data even if a panicking thread poisoned it (a failed test's proxy task).
fn lock_unpoisoned<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

type Matcher = Box<dyn Fn(&[Vec<u8>]) -> bool + Send>;

/// What to do with the reply to a matched command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyFault {
    /// Swallow the reply; the connection stays open.
    Drop,
    /// Hold the reply (and, TCP being ordered, everything behind it) this long.
    Delay(Duration),
    /// Reset the connection (RST) instead of delivering the reply: the command ran, its
    /// reply is lost with the connection.
    Reset,
}

struct Rule {
    matcher: Matcher,
    fault: ReplyFault,
    remaining: u32,
}

#[derive(Default)]
struct Faults {
    latency: Duration,
    rule: Option<Rule>,
}

#[derive(Default)]
struct Shared {
    faults: Mutex<Faults>,
    blackhole: watch::Sender<bool>,
    connections: Mutex<Vec<Arc<Notify>>>,
    accepted: AtomicU64,
    replies_faulted: AtomicU64,
    faulted: Notify,
}

impl Shared {
    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        lock_unpoisoned(&self.faults)
    }

    fn count_fault(&self) {
        self.replies_faulted.fetch_add(1, Ordering::SeqCst);
        self.faulted.notify_waiters();
    }
}

/// A running proxy; stops (and resets its connections) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset_all();
    }
}

impl Proxy {
    /// Starts a proxy to `upstream` on a free loopback port.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn(accept_loop(listener, upstream, shared.clone()));
        Proxy {
            addr,
            shared,
            accept,
        }
    }

    /// Starts a proxy to `server`.
    pub async fn to(server: &crate::server::RedisServer) -> Proxy {
        Proxy::start(SocketAddr::from(([127, 0, 0, 1], server.port()))).await
    }

    /// The proxy's own address (`127.0.0.1:<proxy port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:<proxy port>/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Adds `latency` before every request is forwarded (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        self.shared.faults().latency = latency;
    }

    /// While on, no byte passes in either direction and connections stay open; the stalled
    /// bytes flow again when it is turned off.
    pub fn set_blackhole(&self, on: bool) {
        self.shared.blackhole.send_replace(on);
    }

    /// Applies `fault` to the replies of the next `count` commands that `matcher` accepts
    /// (it sees the command's arguments, name first).
    pub fn fault_next_replies(
        &self,
        count: u32,
        fault: ReplyFault,
        matcher: impl Fn(&[Vec<u8>]) -> bool + Send + 'static,
    ) {
        self.shared.faults().rule = Some(Rule {
            matcher: Box::new(matcher),
            fault,
            remaining: count,
        });
    }

    /// Replies dropped or delayed so far.
    pub fn replies_faulted(&self) -> u64 {
        self.shared.replies_faulted.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` replies were dropped or delayed (or `within` passes).
    pub async fn wait_faulted(&self, n: u64, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.shared.faulted.notified();
            if self.replies_faulted() >= n {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.replies_faulted() >= n;
            }
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Resets (RST) every open connection; returns how many there were.
    pub fn reset_all(&self) -> usize {
        let conns = std::mem::take(&mut *lock_unpoisoned(&self.shared.connections));
        for kill in &conns {
            kill.notify_one();
        }
        conns.len()
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return; // dropping `client` closes it: the client sees a failed connection
            };
            let kill = Arc::new(Notify::new());
            lock_unpoisoned(&shared.connections).push(kill.clone());
            serve(client, server, shared, kill).await;
        });
    }
}

async fn serve(client: TcpStream, server: TcpStream, shared: Arc<Shared>, kill: Arc<Notify>) {
    // Closing with a zero linger sends RST: a reset, not an orderly shutdown.
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_rd, client_wr) = client.into_split();
    let (server_rd, server_wr) = server.into_split();
    let pending = Pending::default();
    let requests = Pipe::new(client_rd, server_wr, &shared);
    let replies = Pipe::new(server_rd, client_wr, &shared);
    let requests = pump_requests(requests, shared.clone(), pending.clone());
    let replies = pump_replies(replies, shared, pending);
    // Either direction ending (EOF, error, reset) ends the connection in both.
    tokio::select! {
        () = requests => {}
        () = replies => {}
        () = kill.notified() => {}
    }
}

/// Per connection, the fault marked for the reply to each command sent, oldest first.
type Pending = Arc<Mutex<VecDeque<Option<ReplyFault>>>>;

/// One direction of a proxied connection: bytes read, split into RESP frames, written on.
struct Pipe {
    from: OwnedReadHalf,
    to: OwnedWriteHalf,
    blackhole: watch::Receiver<bool>,
    buf: Vec<u8>,
}

impl Pipe {
    fn new(from: OwnedReadHalf, to: OwnedWriteHalf, shared: &Shared) -> Pipe {
        Pipe {
            from,
            to,
            blackhole: shared.blackhole.subscribe(),
            buf: Vec::new(),
        }
    }

    /// Reads what arrived; false once the connection ended (EOF, error, reset).
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.from.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next complete frame read, if one is.
    fn next_frame(&mut self) -> Option<Vec<u8>> {
        let len = frame_len(&self.buf)?;
        Some(self.buf.drain(..len).collect())
    }

    /// Writes `bytes` even while the black hole is on; false if the connection ended.
    async fn write(&mut self, bytes: &[u8]) -> bool {
        self.to.write_all(bytes).await.is_ok()
    }

    /// Writes `bytes` once the black hole is off; false if the connection ended.
    async fn forward(&mut self, bytes: &[u8]) -> bool {
        self.blackhole.wait_for(|on| !on).await.is_ok() && self.write(bytes).await
    }
}

/// Client to server: counts commands (and marks the ones whose reply a rule targets).
async fn pump_requests(mut pipe: Pipe, shared: Arc<Shared>, pending: Pending) {
    while pipe.fill().await {
        let mut out = Vec::new();
        let latency;
        {
            let mut faults = shared.faults();
            latency = faults.latency;
            while let Some(frame) = pipe.next_frame() {
                let args = command_args(&frame);
                let mut fault = None;
                if let Some(rule) = faults.rule.as_mut() {
                    if (rule.matcher)(&args) {
                        fault = Some(rule.fault);
                        rule.remaining -= 1;
                        if rule.remaining == 0 {
                            faults.rule = None;
                        }
                    }
                }
                lock_unpoisoned(&pending).push_back(fault);
                out.extend_from_slice(&frame);
            }
        }
        if out.is_empty() {
            continue;
        }
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if !pipe.forward(&out).await {
            return;
        }
    }
}

/// Server to client: applies the fault marked for each reply.
async fn pump_replies(mut pipe: Pipe, shared: Arc<Shared>, pending: Pending) {
    while pipe.fill().await {
        let mut out = Vec::new();
        while let Some(frame) = pipe.next_frame() {
            // Pushes and attributes are not replies: pass them on uncounted.
            let counted = !matches!(frame.first(), Some(b'>') | Some(b'|'));
            let fault = if counted {
                lock_unpoisoned(&pending).pop_front().flatten()
            } else {
                None
            };
            match fault {
                None => out.extend_from_slice(&frame),
                Some(ReplyFault::Drop) => shared.count_fault(),
                Some(ReplyFault::Delay(delay)) => {
                    if !out.is_empty() && !pipe.write(&std::mem::take(&mut out)).await {
                        return;
                    }
                    shared.count_fault();
                    tokio::time::sleep(delay).await;
                    out.extend_from_slice(&frame);
                }
                Some(ReplyFault::Reset) => {
                    let _ = pipe.write(&out).await;
                    shared.count_fault();
                    // Ending the pump ends the connection; the zero linger makes it a reset.
                    return;
                }
            }
        }
        if out.is_empty() {
            continue;
        }
        if !pipe.forward(&out).await {
            return;
        }
    }
}

/// Length of the complete RESP2/RESP3 frame at the start of `buf`, or `None` if incomplete.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    frame_end(buf, 0)
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn header_number(buf: &[u8], pos: usize) -> Option<(i64, usize)> {
    let end = line_end(buf, pos + 1)?;
    let n = std::str::from_utf8(&buf[pos + 1..end]).ok()?.parse().ok()?;
    Some((n, end + 2))
}

fn frame_end(buf: &[u8], pos: usize) -> Option<usize> {
    match *buf.get(pos)? {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => line_end(buf, pos + 1).map(|e| e + 2),
        b'$' | b'!' | b'=' => {
            let (len, body) = header_number(buf, pos)?;
            if len < 0 {
                return Some(body);
            }
            let end = body + len as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let (n, mut next) = header_number(buf, pos)?;
            let items = if matches!(buf[pos], b'%' | b'|') {
                n * 2
            } else {
                n
            };
            for _ in 0..items.max(0) {
                next = frame_end(buf, next)?;
            }
            Some(next)
        }
        // An inline command: one line.
        _ => line_end(buf, pos).map(|e| e + 2),
    }
}

/// The arguments of a command frame (an array of bulk strings); empty for anything else.
pub fn command_args(frame: &[u8]) -> Vec<Vec<u8>> {
    let mut args = Vec::new();
    let Some((n, mut pos)) = (frame.first() == Some(&b'*'))
        .then(|| header_number(frame, 0))
        .flatten()
    else {
        return args;
    };
    for _ in 0..n.max(0) {
        let Some((len, body)) = header_number(frame, pos) else {
            break;
        };
        let end = body + len.max(0) as usize;
        args.push(frame[body..end.min(frame.len())].to_vec());
        pos = end + 2;
    }
    args
}
