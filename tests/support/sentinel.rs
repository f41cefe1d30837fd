//! Redis Sentinel groups for the tests: a master, its replicas and three sentinels, every
//! process on a free loopback port and stopped by PID.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::belief::{Probe, Round};
use crate::cli::cli;
use crate::delay::DelayProxy;
use crate::server::{free_port, redis_binary, RedisServer, TlsFiles, READY_WITHIN};

/// The shape of a [`RedisSentinel`] group.
#[derive(Debug, Clone, Copy)]
pub struct SentinelOptions {
    /// Replicas of the master (the shape the Redis docs recommend has two).
    pub replicas: usize,
    /// The sentinels' `down-after-milliseconds`: how long a master may not answer before
    /// they fail it over.
    pub down_after: Duration,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            replicas: 1,
            down_after: Duration::from_secs(5),
        }
    }
}

/// A Redis Sentinel deployment on free loopback ports: one master, its replicas (one unless
/// [`SentinelOptions`] says otherwise) and three sentinels (`redis-server <file> --sentinel`,
/// each with its configuration file in its own temporary folder, quorum 2), every process
/// stopped by PID when dropped.
pub struct RedisSentinel {
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
}

/// One `redis-server --sentinel` process.
struct SentinelProcess {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
    tls: bool,
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisSentinel {
    /// The service (master name) the sentinels watch.
    pub const SERVICE: &'static str = "distlock-test";

    /// Starts the master, one replica (synced) and three sentinels, and waits until every
    /// sentinel names the master, knows the replica and the other two sentinels.
    pub fn start() -> RedisSentinel {
        Self::start_with(SentinelOptions::default())
    }

    /// [`RedisSentinel::start`] with `options.replicas` replicas and the sentinels'
    /// `down-after-milliseconds` at `options.down_after`.
    pub fn start_with(options: SentinelOptions) -> RedisSentinel {
        assert!(options.replicas >= 1, "a Sentinel group needs a replica");
        let master = RedisServer::start();
        let mut servers: Vec<RedisServer> = (0..options.replicas)
            .map(|_| RedisServer::start_replica_of(&master))
            .collect();
        servers.insert(0, master);
        let port = servers[0].port();
        let sentinels = (0..3)
            .map(|_| start_sentinel_with(port, 2, options.down_after, None))
            .collect();
        let group = RedisSentinel { servers, sentinels };
        group.wait_until(port, true);
        group
    }

    /// `redis://127.0.0.1:<port>` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The port of the master, as the first sentinel names it.
    pub fn master_port(&self) -> u16 {
        let reply = cli(
            self.sentinels[0].port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE],
        );
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .expect("the sentinel names a master")
    }

    /// A [`Probe`] for [`crate::belief`]: the master the first sentinel names now.
    pub fn probe(&self) -> Probe {
        let url = self.sentinel_urls()[0].clone();
        std::sync::Arc::new(move || {
            let url = url.clone();
            Box::pin(async move {
                let client = redis::Client::open(url).ok()?;
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                let named: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(Self::SERVICE)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                named.map(|(_, port)| port)
            })
        })
    }

    /// A [`crate::belief`] round against this group: clients through the sentinels, the
    /// holder's lock with `ttl` and `replicas` acknowledgements, the named master probed.
    pub fn belief_round(
        &self,
        (ttl, replicas): (Duration, usize),
        run: Duration,
        contender_from: Duration,
    ) -> Round {
        let urls = self.sentinel_urls();
        Round {
            connect: std::sync::Arc::new(move || {
                let urls = urls.clone();
                Box::pin(async move {
                    distlock::Config::sentinel(urls, Self::SERVICE)
                        .connect()
                        .await
                        .expect("connect through the sentinels")
                })
            }),
            ttl,
            replicas,
            renew: true,
            run,
            contender_from,
            probe: Some(self.probe()),
            kind: crate::belief::Kind::Lock,
        }
    }

    /// Sends `signal` (`-KILL`, `-STOP`, `-CONT`) to the current master by PID; its port.
    pub fn signal_master(&self, signal: &str) -> u16 {
        let master = self.master();
        master.signal(signal);
        master.port()
    }

    /// Waits (blocking, up to 40 s) until the sentinels promote another master than `old`;
    /// its port.
    pub fn wait_for_promotion(&self, old: u16) -> u16 {
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(new) = self.promoted(old) {
                return new;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the sentinels did not promote a replica"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The data server (master or replica) on `port`.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .expect("a server of this group")
    }

    /// The current master.
    pub fn master(&self) -> &RedisServer {
        self.server(self.master_port())
    }

    /// A replica of the current master (the first one, with several).
    pub fn replica(&self) -> &RedisServer {
        self.replicas().next().expect("a replica")
    }

    /// Every data server that is not the current master.
    pub fn replicas(&self) -> impl Iterator<Item = &RedisServer> {
        let master = self.master_port();
        self.servers.iter().filter(move |s| s.port() != master)
    }

    /// Every data server of the group (the master and its replicas).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// `SENTINEL FAILOVER` (the replica is promoted, the old master made its replica), without
    /// waiting; see [`RedisSentinel::wait_until_settled`].
    pub fn start_failover(&self) {
        let reply = cli(
            self.sentinels[0].port,
            &["SENTINEL", "FAILOVER", Self::SERVICE],
        );
        assert!(reply.contains("OK"), "SENTINEL FAILOVER: {reply}");
    }

    /// Kills the master (`SIGKILL`) and returns, once every sentinel names the promoted
    /// replica and it says it is a master (an unplanned failover: the sentinels wait for their
    /// `down-after-milliseconds`, 5 s, then elect a leader), the new master's port.
    pub fn kill_master(&mut self) -> u16 {
        let old = self.master_port();
        self.servers
            .iter_mut()
            .find(|s| s.port() == old)
            .expect("the master")
            .kill();
        self.wait_for_promotion(old)
    }

    /// The port of the master every sentinel names instead of `old`, once it says it is a
    /// master itself (`ROLE`); `None` before.
    pub fn promoted(&self, old: u16) -> Option<u16> {
        let named: Vec<Option<u16>> = self
            .sentinels
            .iter()
            .map(|s| {
                let addr = cli(
                    s.port,
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE],
                );
                addr.lines().nth(1).and_then(|p| p.trim().parse().ok())
            })
            .collect();
        let new = named[0].filter(|&p| p != old)?;
        let agreed = named.iter().all(|&p| p == Some(new));
        (agreed && cli(new, &["ROLE"]).lines().next() == Some("master")).then_some(new)
    }

    /// Points every replica at the master through a delay line of its own (`lag` each way),
    /// returned once each replicates through it and the master's writes are acknowledged: a
    /// write reaches the replicas `lag` after the master applied it, and
    /// [`DelayProxy::hold`] keeps it from them, so a failover promotes a replica without it.
    /// The sentinels still list the replicas (they read them from the master); they point
    /// them back at the master themselves at a failover, or `failover-timeout` (10 s) after
    /// they first saw them.
    pub fn replicate_through_delay(&self, lag: Duration) -> Vec<DelayProxy> {
        let master = self.master();
        // (replica, its delay line, the line's port)
        let lines: Vec<(u16, DelayProxy, String)> = self
            .replicas()
            .map(|replica| {
                let line = DelayProxy::to(master, lag);
                let port = line.addr().port().to_string();
                (replica.port(), line, port)
            })
            .collect();
        for (replica, _, port) in &lines {
            let reply = cli(*replica, &["REPLICAOF", "127.0.0.1", port]);
            assert!(
                reply.contains("OK"),
                "REPLICAOF through the delay line: {reply}"
            );
        }
        let count = lines.len().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let through = lines.iter().all(|(replica, _, port)| {
                let info = cli(*replica, &["INFO", "replication"]);
                let line = |l: &str| info.lines().any(|x| x.trim_end() == l);
                line(&format!("master_port:{port}")) && line("master_link_status:up")
            });
            if through && cli(master.port(), &["WAIT", &count, "1000"]).trim() == count {
                return lines.into_iter().map(|(_, line, _)| line).collect();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the replicas did not replicate through their delay lines"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `SENTINEL FAILOVER`, returned once it is over (see
    /// [`RedisSentinel::wait_until_settled`]); the new master's port.
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        self.start_failover();
        let new = self.wait_for_promotion(old);
        self.wait_until_settled(new);
        new
    }

    /// Waits until every sentinel names the master on `master` and sees the other two
    /// sentinels, the master says so itself (`ROLE`), the other server is its replica (link
    /// up) and acknowledges its writes (`WAIT`). (The sentinels' own view of the replica lags:
    /// they ask replicas every 10 s.)
    pub fn wait_until_settled(&self, master: u16) {
        self.wait_until(master, false);
    }

    /// [`RedisSentinel::wait_until_settled`]; with `replica_known`, also until every sentinel
    /// knows the replica as one (what `SENTINEL FAILOVER` needs).
    fn wait_until(&self, master: u16, replica_known: bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        let replicas: Vec<u16> = self
            .servers
            .iter()
            .map(RedisServer::port)
            .filter(|p| *p != master)
            .collect();
        let count = replicas.len().to_string();
        loop {
            let sentinels_agree = self.sentinels.iter().all(|s| {
                let addr = cli(
                    s.port,
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE],
                );
                let state = cli(s.port, &["SENTINEL", "MASTER", Self::SERVICE]);
                addr.lines().nth(1) == Some(&master.to_string())
                    && field(&state, "flags") == Some("master")
                    && field(&state, "num-other-sentinels") == Some("2")
                    && (!replica_known
                        || field(&state, "num-slaves") == Some(&count)
                            && replicas_known(s.port, &replicas))
            });
            let roles_agree = sentinels_agree
                && cli(master, &["ROLE"]).lines().next() == Some("master")
                && replicas.iter().all(|&replica| {
                    let info = cli(replica, &["INFO", "replication"]);
                    info.contains(&format!("master_port:{master}"))
                        && info.contains("master_link_status:up")
                });
            if roles_agree && cli(master, &["WAIT", &count, "500"]).trim() == count {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the Sentinel group did not settle on master {master}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// True when the sentinel on `sentinel` knows every one of `replicas` as a replica whose link
/// to the master is up.
fn replicas_known(sentinel: u16, replicas: &[u16]) -> bool {
    let listed = cli(sentinel, &["SENTINEL", "REPLICAS", RedisSentinel::SERVICE]);
    // One flat field list per replica, each starting with `name`.
    let entries: Vec<&str> = listed.split("\nname\n").collect();
    replicas.iter().all(|port| {
        entries.iter().any(|entry| {
            let entry = format!("name\n{}", entry.trim_start_matches("name\n"));
            field(&entry, "port") == Some(&port.to_string()[..])
                && field(&entry, "flags") == Some("slave")
                && field(&entry, "role-reported") == Some("slave")
                && field(&entry, "master-link-status") == Some("ok")
        })
    })
}

/// The value after the line `name` in `redis-cli` output of a flat field list.
fn field<'a>(output: &'a str, name: &str) -> Option<&'a str> {
    let mut lines = output.lines();
    lines.by_ref().find(|l| *l == name)?;
    lines.next()
}

/// One sentinel (`redis-server <file> --sentinel`, quorum 1) watching one server as
/// [`RedisSentinel::SERVICE`], killed by PID when dropped: enough to find a master, not to fail
/// it over.
pub struct LoneSentinel(SentinelProcess);

impl LoneSentinel {
    /// Starts a sentinel watching `master`; with `tls` it serves TLS only (`rediss://`) and
    /// reaches the master over TLS (`tls-replication yes`).
    pub fn start(master: &RedisServer, tls: Option<&TlsFiles>) -> LoneSentinel {
        let down_after = SentinelOptions::default().down_after;
        LoneSentinel(start_sentinel_with(master.port(), 1, down_after, tls))
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.0.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.0.port)
    }
}

/// Starts one sentinel watching the master on `master` with `quorum` and `down_after`,
/// returned once it listens.
fn start_sentinel_with(
    master: u16,
    quorum: usize,
    down_after: Duration,
    tls: Option<&TlsFiles>,
) -> SentinelProcess {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("distlock-sentinel-{port}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("sentinel.conf");
    let service = RedisSentinel::SERVICE;
    let listen = match tls {
        None => format!("port {port}\n"),
        Some(tls) => format!(
            "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-auth-clients no\ntls-replication yes\n",
            tls.cert.display(),
            tls.key.display(),
            tls.ca.display()
        ),
    };
    let config = format!(
        "{listen}bind 127.0.0.1\nprotected-mode no\ndaemonize no\nlogfile \"\"\n\
         dir {dir}\n\
         sentinel monitor {service} 127.0.0.1 {master} {quorum}\n\
         sentinel down-after-milliseconds {service} {down_after}\n\
         sentinel failover-timeout {service} 10000\n\
         sentinel parallel-syncs {service} 1\n",
        dir = dir.display(),
        down_after = down_after.as_millis()
    );
    std::fs::write(&file, config).expect("write sentinel.conf");
    let child = Command::new(redis_binary())
        .arg(&file)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start redis-server --sentinel ({e})"));
    let sentinel = SentinelProcess {
        child,
        port,
        dir,
        tls: tls.is_some(),
    };
    let deadline = std::time::Instant::now() + READY_WITHIN;
    let answers = || match tls {
        None => cli(port, &["PING"]).trim() == "PONG",
        Some(_) => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    };
    while !answers() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sentinel on port {port} did not answer"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sentinel
}
