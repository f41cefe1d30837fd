//! Redis Clusters made with `redis-cli --cluster create` from throwaway servers: health,
//! topology questions, `CLUSTER FAILOVER`, slot migration, a killed node and its takeover.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cli::{cli_with, redis_cli, tls_cli_args};
use crate::server::{RedisServer, ServerOptions, TlsFiles};

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

    /// `n` clients of this cluster (each its own connection, as separate processes have),
    /// with a 3 s response timeout for the slower calls of a loaded machine.
    pub async fn clients(&self, n: usize) -> Vec<distlock::Client> {
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            let config = distlock::Config::cluster(self.urls())
                .response_timeout(std::time::Duration::from_secs(3));
            clients.push(config.connect().await.expect("connect to the cluster"));
        }
        clients
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
        self.try_master_of_slot(slot)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// [`RedisCluster::master_of_slot`], or `None` while no master serves it (or no node
    /// answers).
    pub fn try_master_of_slot(&self, slot: u16) -> Option<u16> {
        let port = self.live_nodes().next()?.port();
        let nodes = self.cli(port, &["CLUSTER", "NODES"]);
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
                        return Some(port_of(fields[1]));
                    }
                }
            }
        }
        None
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
        self.nodes.iter().filter(|n| n.is_running())
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
