//! Test support for distlock's integration tests, examples and benchmarks: throwaway
//! `redis-server` processes on free loopback ports, stopped by PID.
//!
//! Each [`RedisServer`] runs with `--save ""` and no AOF, so nothing touches the disk, and is
//! killed when dropped. `scripts/test.sh` installs `redis-server` when it is missing.
#![deny(missing_docs)]

mod fairness;
mod pki;

pub use fairness::{fairness_run, jain, Fairness, FairnessRun};
pub use pki::{Pki, TlsFiles};

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a server may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A `redis-server` child process on `127.0.0.1:<port>`.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    extra: Vec<String>,
    password: Option<String>,
    tls: bool,
}

/// Options for [`RedisServer::start_with`].
#[derive(Default, Clone)]
pub struct ServerOptions {
    /// `--requirepass`.
    pub password: Option<String>,
    /// `--cluster-enabled yes` (a one-node cluster, for `CLUSTER KEYSLOT`).
    pub cluster: bool,
    /// Use this port instead of a free one.
    pub port: Option<u16>,
    /// Serve TLS only (`--tls-port`, no plain port): [`RedisServer::url`] is `rediss://`.
    pub tls: Option<TlsFiles>,
    /// More `redis-server` arguments (e.g. `--replicaof 127.0.0.1 <port>`).
    pub args: Vec<String>,
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

fn redis_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

impl RedisServer {
    /// Starts a plain server on a free port.
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::default())
    }

    /// Adds ACL user `name` with password `password` and `rules` (after `on`, e.g. `~*`,
    /// `&*`, `+@all`, `-hset`) and returns a URL that logs in as it.
    pub async fn acl_user(&self, name: &str, password: &str, rules: &[&str]) -> String {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(name)
            .arg("on")
            .arg(format!(">{password}"))
            .arg(rules)
            .exec_async(&mut self.conn().await)
            .await
            .expect("ACL SETUSER");
        format!("redis://{name}:{password}@127.0.0.1:{}/", self.port)
    }

    /// Starts a TLS-only server with these files (see [`Pki::files`]).
    pub fn start_tls(files: TlsFiles) -> RedisServer {
        Self::start_with(ServerOptions {
            tls: Some(files),
            ..Default::default()
        })
    }

    /// Starts a server with options.
    pub fn start_with(opts: ServerOptions) -> RedisServer {
        let port = opts.port.unwrap_or_else(free_port);
        let mut extra = Vec::new();
        if let Some(pass) = &opts.password {
            extra.extend(["--requirepass".to_owned(), pass.clone()]);
        }
        if let Some(tls) = &opts.tls {
            let path = |p: &std::path::Path| p.display().to_string();
            extra.extend([
                "--tls-port".to_owned(),
                port.to_string(),
                "--tls-cert-file".to_owned(),
                path(&tls.cert),
                "--tls-key-file".to_owned(),
                path(&tls.key),
                "--tls-ca-cert-file".to_owned(),
                path(&tls.ca),
                "--tls-auth-clients".to_owned(),
                if tls.auth_clients { "yes" } else { "no" }.to_owned(),
            ]);
        }
        extra.extend(opts.args.iter().cloned());
        if opts.cluster {
            let dir = std::env::temp_dir().join(format!("distlock-cluster-{port}"));
            std::fs::create_dir_all(&dir).expect("temp dir");
            // A node file left by an earlier server on this port would make a stale node.
            let _ = std::fs::remove_file(dir.join("nodes.conf"));
            extra.extend([
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                dir.join("nodes.conf").display().to_string(),
            ]);
        }
        let mut server = RedisServer {
            child: None,
            port,
            extra,
            password: opts.password,
            tls: opts.tls.is_some(),
        };
        server.spawn();
        server
    }

    /// The server's working directory (emptied of snapshots before each start).
    fn data_dir(&self) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("distlock-redis-{}", self.port));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let _ = std::fs::remove_file(dir.join("dump.rdb"));
        dir
    }

    fn spawn(&mut self) {
        // A TLS server listens on its TLS port only.
        let plain_port = if self.tls { 0 } else { self.port };
        let mut child = Command::new(redis_binary())
            .args(["--port", &plain_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            // A replica writes the snapshot its master sends it to its working directory, and
            // every server loads a snapshot it finds there: one empty folder per port.
            .args(["--dir", &self.data_dir().display().to_string()])
            // A master sends its first replica the snapshot at once, not after 5 s.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); run scripts/test.sh, which installs it")
            });
        // The server's own log line is the readiness signal.
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut ready = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("Ready to accept connections") {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        if rx.recv_timeout(READY_WITHIN).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redis-server on port {} did not become ready", self.port);
        }
        self.child = Some(child);
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// `redis://127.0.0.1:<port>/` (with the password, if any; `rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        match &self.password {
            Some(pass) => format!("{scheme}://:{pass}@127.0.0.1:{}/", self.port),
            None => format!("{scheme}://127.0.0.1:{}/", self.port),
        }
    }

    /// A plain redis-rs client for assertions.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("valid url")
    }

    /// A multiplexed connection for assertions.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to test redis")
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} failed");
    }

    /// Starts a replica of `master` (`--replicaof`), returned once the master counts it online.
    pub fn start_replica_of(master: &RedisServer) -> RedisServer {
        let replica = Self::start_with(ServerOptions {
            args: vec![
                "--replicaof".to_owned(),
                "127.0.0.1".to_owned(),
                master.port().to_string(),
            ],
            ..Default::default()
        });
        let online = std::time::Instant::now() + READY_WITHIN;
        while master.replicas_online() < 1 {
            assert!(
                std::time::Instant::now() < online,
                "the replica on port {} did not come online",
                replica.port()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Online is not yet acknowledging (the replica may still be loading the snapshot):
        // wait until a write is acknowledged, so tests start from a replica that answers WAIT.
        let mut conn = master
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to test redis");
        loop {
            let () = redis::cmd("SET")
                .arg("testkit:replica-sync")
                .arg(1)
                .query(&mut conn)
                .expect("SET");
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(500)
                .query(&mut conn)
                .expect("WAIT");
            if acked >= 1 {
                break;
            }
            assert!(
                std::time::Instant::now() < online,
                "the replica on port {} does not acknowledge writes",
                replica.port()
            );
        }
        let () = redis::cmd("DEL")
            .arg("testkit:replica-sync")
            .query(&mut conn)
            .expect("DEL");
        replica
    }

    /// Replicas the server counts as online (`INFO replication`), asked on a blocking
    /// connection so it works outside a runtime too.
    pub fn replicas_online(&self) -> usize {
        let mut conn = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to test redis");
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .expect("INFO replication");
        info.lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count()
    }

    /// Freezes the server (`SIGSTOP`): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Freezes the server (`SIGSTOP`) until the returned guard is dropped (`SIGCONT`), so a
    /// failing test never leaves a stopped `redis-server` behind; [`Paused::resume`] thaws it
    /// earlier.
    pub fn paused(&self) -> Paused<'_> {
        self.pause();
        Paused {
            server: self,
            resumed: false,
        }
    }

    /// Kills the server with `SIGKILL` and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (after [`RedisServer::kill`]); data is gone.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

/// A server frozen by [`RedisServer::paused`]; thawed when dropped.
pub struct Paused<'a> {
    server: &'a RedisServer,
    resumed: bool,
}

impl Paused<'_> {
    /// Thaws the server now (`SIGCONT`).
    pub fn resume(mut self) {
        self.thaw();
    }

    fn thaw(&mut self) {
        if !std::mem::replace(&mut self.resumed, true) && self.server.child.is_some() {
            self.server.resume();
        }
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.thaw();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused server ignores SIGTERM but not SIGKILL.
            self.kill();
        }
    }
}

/// A Redis Cluster of `masters` masters with `replicas` replicas each, on free loopback ports,
/// created with `redis-cli --cluster create`; every node is stopped by PID when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// The CA file of a TLS-only cluster ([`RedisCluster::start_tls`]): `redis-cli` needs it.
    tls_ca: Option<std::path::PathBuf>,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every node reports it healthy
    /// and knows every slot.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        Self::start_with(masters, replicas, ServerOptions::default())
    }

    /// Like [`RedisCluster::start`], every node started with `options` (`cluster` is set here;
    /// with `tls`, see [`RedisCluster::start_tls`]).
    pub fn start_with(masters: usize, replicas: usize, options: ServerOptions) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                RedisServer::start_with(ServerOptions {
                    cluster: true,
                    ..options.clone()
                })
            })
            .collect();
        let tls_ca = options.tls.as_ref().map(|tls| tls.ca.clone());
        let mut create = Command::new(redis_cli());
        create.args(tls_cli_args(tls_ca.as_deref()));
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let output = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes, tls_ca };
        cluster.wait_until_healthy(masters, masters * replicas);
        cluster
    }

    /// Waits until every node says `cluster_state:ok` and sees `masters` masters (each with its
    /// slots) and `replicas` replicas, each of them synced with its master.
    pub fn wait_until_healthy(&self, masters: usize, replicas: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let healthy = self.live_nodes().all(|node| {
                let state = self.cli(node.port(), &["CLUSTER", "INFO"]);
                let topology = self.cli(node.port(), &["CLUSTER", "NODES"]);
                let count = |role: &str| {
                    topology
                        .lines()
                        .filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains(role)))
                        .filter(|l| !l.contains("fail"))
                        .count()
                };
                state.contains("cluster_state:ok")
                    && count("master") == masters
                    && count("slave") == replicas
            });
            // And every replica has synced (a replica that is still loading acknowledges
            // nothing, so `WAIT` would count it out).
            let synced: usize = self
                .live_nodes()
                .map(|node| {
                    self.cli(node.port(), &["INFO", "replication"])
                        .lines()
                        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                        .count()
                })
                .sum();
            let healthy = healthy && synced == replicas;
            if healthy {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cluster did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis://127.0.0.1:<port>` of every node (seed nodes for a client; `rediss://` over TLS).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                let scheme = if self.tls_ca.is_some() {
                    "rediss"
                } else {
                    "redis"
                };
                format!("{scheme}://127.0.0.1:{}", n.port())
            })
            .collect()
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// The ports of the current masters.
    pub fn master_ports(&self) -> Vec<u16> {
        self.roles()
            .into_iter()
            .filter(|(_, master)| master.is_none())
            .map(|(port, _)| port)
            .collect()
    }

    /// The port of the master that serves `slot` now.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        let nodes = self.cli(self.live_port(), &["CLUSTER", "NODES"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            if !fields.get(2).is_some_and(|f| f.contains("master")) {
                continue;
            }
            for range in fields.iter().skip(8) {
                let (lo, hi) = match range.split_once('-') {
                    Some((lo, hi)) => (lo.parse::<u16>(), hi.parse::<u16>()),
                    None => (range.parse::<u16>(), range.parse::<u16>()),
                };
                if let (Ok(lo), Ok(hi)) = (lo, hi) {
                    if (lo..=hi).contains(&slot) {
                        return port_of(fields[1]);
                    }
                }
            }
        }
        panic!("no master serves slot {slot}")
    }

    /// A replica of the master on `master` port.
    pub fn replica_of(&self, master: u16) -> u16 {
        self.roles()
            .into_iter()
            .find(|(_, of)| *of == Some(master))
            .map(|(port, _)| port)
            .expect("the master has a replica")
    }

    /// `CLUSTER FAILOVER` on `replica` (a coordinated, lossless switch), returned once it is the
    /// master and every node agrees.
    pub fn failover(&self, replica: u16) {
        let reply = self.cli(replica, &["CLUSTER", "FAILOVER"]);
        assert!(reply.contains("OK"), "CLUSTER FAILOVER: {reply}");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while self
            .roles()
            .iter()
            .any(|(port, of)| *port == replica && of.is_some())
            || !self.all_see_master(replica)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "failover did not finish"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// True once every live node's `CLUSTER NODES` shows `port` as a master.
    fn all_see_master(&self, port: u16) -> bool {
        self.live_nodes().all(|n| {
            let nodes = self.cli(n.port(), &["CLUSTER", "NODES"]);
            nodes.lines().any(|l| {
                l.contains(&format!("127.0.0.1:{port}@"))
                    && l.split(' ').nth(2).is_some_and(|f| f.contains("master"))
            })
        })
    }

    /// Every node's port and, for a replica, its master's port.
    fn roles(&self) -> Vec<(u16, Option<u16>)> {
        let nodes = self.cli(self.live_port(), &["CLUSTER", "NODES"]);
        let ids: Vec<(String, u16)> = nodes
            .lines()
            .map(|l| {
                let fields: Vec<&str> = l.split(' ').collect();
                (fields[0].to_owned(), port_of(fields[1]))
            })
            .collect();
        nodes
            .lines()
            .map(|l| {
                let fields: Vec<&str> = l.split(' ').collect();
                let master = match fields[3] {
                    "-" => None,
                    id => ids.iter().find(|(i, _)| i == id).map(|(_, p)| *p),
                };
                (port_of(fields[1]), master)
            })
            .collect()
    }
}

/// Topology changes of a running cluster: single-slot migration, SIGKILL of a node and the
/// promotion of its replica (`CLUSTER FAILOVER TAKEOVER`), a TLS-only cluster.
impl RedisCluster {
    /// Starts a cluster whose nodes serve TLS only (`--tls-port`, `--tls-cluster yes`,
    /// `--tls-replication yes`; no plain port), certificates from `tls`; [`RedisCluster::urls`]
    /// are `rediss://`. The node certificate must name `127.0.0.1` (nodes dial each other
    /// there, checking it against `tls.ca`).
    pub fn start_tls(masters: usize, replicas: usize, tls: TlsFiles) -> RedisCluster {
        Self::start_with(
            masters,
            replicas,
            ServerOptions {
                tls: Some(tls.clone()),
                args: [
                    "--tls-cluster",
                    "yes",
                    "--tls-replication",
                    "yes",
                    // Nodes present the server certificate to each other as clients too.
                    "--tls-client-cert-file",
                    &tls.cert.display().to_string(),
                    "--tls-client-key-file",
                    &tls.key.display().to_string(),
                ]
                .map(str::to_owned)
                .to_vec(),
                ..Default::default()
            },
        )
    }

    /// A cluster of one master that serves every slot (`CLUSTER ADDSLOTSRANGE 0 16383`;
    /// `redis-cli --cluster create` wants three masters), no replicas.
    pub fn start_single_master() -> RedisCluster {
        let node = RedisServer::start_with(ServerOptions {
            cluster: true,
            ..Default::default()
        });
        let reply = cli_with(
            None,
            node.port(),
            &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"],
        );
        assert!(reply.contains("OK"), "CLUSTER ADDSLOTSRANGE: {reply}");
        let cluster = RedisCluster {
            nodes: vec![node],
            tls_ca: None,
        };
        cluster.wait_until_healthy(1, 0);
        cluster
    }

    /// One `redis-cli` command against the node on `port` (over TLS for a TLS cluster).
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        cli_with(self.tls_ca.as_deref(), port, args)
    }

    /// The nodes that have not been killed.
    fn live_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.child.is_some())
    }

    /// The port of a node that has not been killed (where topology questions go).
    fn live_port(&self) -> u16 {
        self.live_nodes()
            .next()
            .map(RedisServer::port)
            .expect("a live node")
    }

    /// The node id (`CLUSTER MYID`) of the node on `port`.
    pub fn node_id(&self, port: u16) -> String {
        self.cli(port, &["CLUSTER", "MYID"]).trim().to_owned()
    }

    /// Moves `slot` (with its keys, TTLs kept) from its master to the master on `to`, the way
    /// `redis-cli --cluster reshard` moves each slot: `SETSLOT IMPORTING` on the target,
    /// `MIGRATING` on the source, `MIGRATE` of its keys in batches (clients meanwhile get `ASK`
    /// for keys already moved), then `SETSLOT NODE` on the target, the source and every other
    /// master. Returns once every live node maps the slot to `to`.
    pub fn migrate_slot(&self, slot: u16, to: u16) {
        self.migrate_slot_paced(slot, to, Duration::ZERO);
    }

    /// [`RedisCluster::migrate_slot`], one key per `MIGRATE` with `pause` after each: the slot
    /// stays half-moved (clients get `ASK` for the keys already on `to`) for `pause` × keys.
    pub fn migrate_slot_paced(&self, slot: u16, to: u16, pause: Duration) {
        let from = self.master_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is already served by {to}");
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let slot_arg = slot.to_string();
        let ok = |port: u16, args: &[&str]| {
            let reply = self.cli(port, args);
            assert!(reply.contains("OK"), "{args:?} on {port}: {reply}");
        };
        ok(
            to,
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id],
        );
        ok(
            from,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id],
        );
        loop {
            let batch = if pause.is_zero() { "100" } else { "1" };
            let keys = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, batch]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let to_port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            let reply = self.cli(from, &args);
            assert!(reply.contains("OK"), "MIGRATE: {reply}");
            std::thread::sleep(pause);
        }
        ok(to, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
        ok(from, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
        for master in self.master_ports() {
            if master != from && master != to {
                ok(master, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let ports: Vec<u16> = self.live_nodes().map(RedisServer::port).collect();
        while !ports
            .iter()
            .all(|&p| self.slot_owner_seen_by(p, slot) == Some(to))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the nodes did not agree on slot {slot}'s new owner"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The master that the node on `port` believes serves `slot`.
    fn slot_owner_seen_by(&self, port: u16, slot: u16) -> Option<u16> {
        let nodes = self.cli(port, &["CLUSTER", "NODES"]);
        nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let serves = fields.iter().skip(8).any(|range| {
                let (lo, hi) = match range.split_once('-') {
                    Some((lo, hi)) => (lo.parse::<u16>(), hi.parse::<u16>()),
                    None => (range.parse::<u16>(), range.parse::<u16>()),
                };
                matches!((lo, hi), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
            });
            serves.then(|| port_of(fields[1]))
        })
    }

    /// Kills the node on `port` with `SIGKILL` (it stays down; dropping the cluster is fine).
    pub fn kill_node(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
            .kill();
    }

    /// `CLUSTER FAILOVER TAKEOVER` on `replica` (its master is down: no agreement is asked of
    /// anyone), returned once every live node sees it as a master.
    pub fn takeover(&self, replica: u16) {
        let reply = self.cli(replica, &["CLUSTER", "FAILOVER", "TAKEOVER"]);
        assert!(reply.contains("OK"), "CLUSTER FAILOVER TAKEOVER: {reply}");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !self.all_see_master(replica) {
            assert!(
                std::time::Instant::now() < deadline,
                "takeover did not finish"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `127.0.0.1:7000@17000` → 7000.
fn port_of(address: &str) -> u16 {
    address
        .split('@')
        .next()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("a node address")
}

fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_owned())
}

/// `redis-cli` arguments for a TLS-only server whose certificate `ca` signed (none without).
fn tls_cli_args(ca: Option<&std::path::Path>) -> Vec<String> {
    match ca {
        Some(ca) => vec![
            "--tls".to_owned(),
            "--cacert".to_owned(),
            ca.display().to_string(),
        ],
        None => Vec::new(),
    }
}

/// One `redis-cli` command against the server on `port`; its output.
fn cli(port: u16, args: &[&str]) -> String {
    cli_with(None, port, args)
}

/// One `redis-cli` command against the node on `port` (over TLS when `ca` is given); its output.
fn cli_with(ca: Option<&std::path::Path>, port: u16, args: &[&str]) -> String {
    let output = Command::new(redis_cli())
        .args(tls_cli_args(ca))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `f` until it returns `Some`, or panics after `within` (for conditions Redis exposes no
/// signal for, such as `PUBSUB CHANNELS` emptying after an asynchronous unsubscribe).
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// All keys on the server (test servers are small).
pub async fn all_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query_async(conn)
        .await
        .expect("KEYS")
}

/// The lock keys on the server (`prefix:{name}`; not fence keys or identity records).
pub async fn lock_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    all_keys(conn)
        .await
        .into_iter()
        .filter(|k| k.ends_with('}'))
        .collect()
}

/// The `calls` count of one command in `INFO commandstats` (e.g. `evalsha`).
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A Redis Sentinel deployment on free loopback ports: one master, one replica and three
/// sentinels (`redis-server <file> --sentinel`, each with its configuration file in its own
/// temporary folder, quorum 2), every process stopped by PID when dropped.
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

    /// Starts the master, its replica (synced) and three sentinels, and waits until every
    /// sentinel names the master, knows the replica and the other two sentinels.
    pub fn start() -> RedisSentinel {
        let master = RedisServer::start();
        let replica = RedisServer::start_replica_of(&master);
        let sentinels = (0..3).map(|_| start_sentinel(master.port())).collect();
        let group = RedisSentinel {
            servers: vec![master, replica],
            sentinels,
        };
        group.wait_until(group.servers[0].port(), true);
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

    /// The current replica.
    pub fn replica(&self) -> &RedisServer {
        let master = self.master_port();
        self.servers
            .iter()
            .find(|s| s.port() != master)
            .expect("a replica")
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
        let new = self.replica().port();
        self.servers
            .iter_mut()
            .find(|s| s.port() == old)
            .expect("the master")
            .kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(40);
        loop {
            let named = self.sentinels.iter().all(|s| {
                let addr = cli(
                    s.port,
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE],
                );
                addr.lines().nth(1) == Some(&new.to_string())
            });
            if named && cli(new, &["ROLE"]).lines().next() == Some("master") {
                return new;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the sentinels did not promote the replica"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `SENTINEL FAILOVER`, returned once it is over (see
    /// [`RedisSentinel::wait_until_settled`]); the new master's port.
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        let new = self.replica().port();
        self.start_failover();
        self.wait_until_settled(new);
        assert_ne!(old, new);
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
        let replica = self
            .servers
            .iter()
            .map(RedisServer::port)
            .find(|p| *p != master)
            .expect("a replica");
        loop {
            let sentinels_agree = self.sentinels.iter().all(|s| {
                let addr = cli(
                    s.port,
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::SERVICE],
                );
                let state = cli(s.port, &["SENTINEL", "MASTER", Self::SERVICE]);
                let replicas = cli(s.port, &["SENTINEL", "REPLICAS", Self::SERVICE]);
                addr.lines().nth(1) == Some(&master.to_string())
                    && field(&state, "flags") == Some("master")
                    && field(&state, "num-other-sentinels") == Some("2")
                    && (!replica_known
                        || field(&state, "num-slaves") == Some("1")
                            && field(&replicas, "port") == Some(&replica.to_string())
                            && field(&replicas, "flags") == Some("slave")
                            && field(&replicas, "role-reported") == Some("slave")
                            && field(&replicas, "master-link-status") == Some("ok"))
            });
            let roles_agree = sentinels_agree
                && cli(master, &["ROLE"]).lines().next() == Some("master")
                && cli(replica, &["INFO", "replication"])
                    .contains(&format!("master_port:{master}"))
                && cli(replica, &["INFO", "replication"]).contains("master_link_status:up");
            if roles_agree && cli(master, &["WAIT", "1", "500"]).trim() == "1" {
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
        LoneSentinel(start_sentinel_with(master.port(), 1, tls))
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.0.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.0.port)
    }
}

/// Starts one sentinel of a [`RedisSentinel`] group watching the master on `master`.
fn start_sentinel(master: u16) -> SentinelProcess {
    start_sentinel_with(master, 2, None)
}

/// Starts one sentinel watching the master on `master` with `quorum`, returned once it
/// listens.
fn start_sentinel_with(master: u16, quorum: usize, tls: Option<&TlsFiles>) -> SentinelProcess {
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
         sentinel down-after-milliseconds {service} 5000\n\
         sentinel failover-timeout {service} 10000\n\
         sentinel parallel-syncs {service} 1\n",
        dir = dir.display()
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

/// One racer of a counter race, the test of mutual exclusion: `rounds` times it takes lock
/// `name` through `client` (lease `ttl`, waiting up to a minute), reads the counter `n` from
/// `store`, yields, writes `n + 1`, runs `inside` (still holding the lock) and releases, which
/// must succeed. Only exclusion keeps the counter exact: read it with [`counter`].
pub async fn race_counter(
    client: distlock::Client,
    store: redis::Client,
    name: &str,
    ttl: Duration,
    rounds: usize,
    mut inside: impl FnMut(),
) {
    let mut conn = store.get_multiplexed_async_connection().await.unwrap();
    for _ in 0..rounds {
        let guard = client
            .lock(name)
            .ttl(ttl)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("acquired within the wait");
        let n: i64 = redis::cmd("GET")
            .arg("n")
            .query_async::<Option<i64>>(&mut conn)
            .await
            .unwrap()
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        redis::cmd("SET")
            .arg("n")
            .arg(n + 1)
            .exec_async(&mut conn)
            .await
            .unwrap();
        inside();
        guard.release().await.expect("held until released");
    }
}

/// The counter of [`race_counter`] on `store` (0 if never written).
pub async fn counter(store: &RedisServer) -> i64 {
    let mut conn = store.conn().await;
    redis::cmd("GET")
        .arg("n")
        .query_async::<Option<i64>>(&mut conn)
        .await
        .expect("GET n")
        .unwrap_or(0)
}

/// A counter race over `clients`: `tasks` tasks per client each run [`race_counter`] on lock
/// `name` for `rounds` rounds; returns the counter once all are done (exact only if no two
/// holders overlapped: it must equal `clients × tasks × rounds`).
pub async fn counter_race(
    clients: &[distlock::Client],
    tasks: usize,
    rounds: usize,
    (name, ttl): (&str, Duration),
    store: &RedisServer,
) -> i64 {
    let mut handles = Vec::new();
    for client in clients {
        for _ in 0..tasks {
            let (client, store, name) = (client.clone(), store.client(), name.to_owned());
            handles.push(tokio::spawn(async move {
                race_counter(client, store, &name, ttl, rounds, || {}).await
            }));
        }
    }
    for handle in handles {
        handle.await.expect("a racer panicked");
    }
    counter(store).await
}

/// `holder` takes lock `name` with a 30 s lease while `waiter` waits for it (up to 10 s); the
/// holder releases after 300 ms. Returns how long the waiter waited: about 300 ms if the
/// release woke it, not the lease.
pub async fn wait_for_release(
    holder: &distlock::Client,
    waiter: distlock::Client,
    name: &str,
) -> Duration {
    let held = holder
        .lock(name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the holder takes the lock");
    let name = name.to_owned();
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = waiter
            .lock(name)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .expect("the waiter gets the lock");
        let waited = started.elapsed();
        guard.release().await.expect("the waiter's release");
        waited
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("the holder's release");
    waiting.await.expect("the waiter panicked")
}

/// Waits until none of `clients` has a background task left (RedLock stragglers, background
/// releases, unsubscribes), failing after `within`.
pub async fn at_rest(clients: &[&distlock::Client], within: Duration) {
    eventually(within, "the clients' background tasks finish", || async {
        clients
            .iter()
            .all(|c| c.background_tasks() == 0)
            .then_some(())
    })
    .await;
}

/// Asserts that `result` failed with `Error::NoQuorum` for a majority of `required`, with fewer
/// than that agreeing.
pub fn expect_no_quorum<T: std::fmt::Debug>(result: Result<T, distlock::Error>, required: usize) {
    match result {
        Err(distlock::Error::NoQuorum {
            agreed,
            required: needed,
            ..
        }) => {
            assert_eq!(needed, required, "the majority named");
            assert!(agreed < required, "{agreed} agreed, yet NoQuorum");
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}
