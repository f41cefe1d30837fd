//! [`TestCluster`]: a Redis Cluster for tests (3 masters, each a supervised `redis-server` as
//! [`TestRedis`] is, the slots split between them) and its faults, made on the node that owns
//! a lock's slot.

use std::ops::Range;
use std::time::Duration;

use crate::config::Config;
use crate::testing::pause::Paused;
use crate::testing::server::{lock_key, TestRedis};
use crate::testing::settle::{io, until, Folder};
use crate::testing::take_away::NewHolder;
use crate::wire::keys::hash_slot;

/// How many masters a [`TestCluster`] has.
const MASTERS: u16 = 3;

/// A Redis Cluster has 16384 hash slots.
const SLOTS: u16 = 16384;

/// How long the nodes may take to meet and agree that every slot is served.
const SETTLE_WITHIN: Duration = Duration::from_secs(30);

/// A Redis Cluster on free loopback ports: 3 masters, the 16384 slots split evenly between
/// them (no replicas), stopped when dropped (or when the test process exits). Connect with
/// [`TestCluster::config`], as a service configures [`Config::cluster`]. Every fault of a
/// [`TestRedis`] is made on the node that owns the lock's slot: [`TestCluster::expire_lock`],
/// [`TestCluster::steal_lock`], [`TestCluster::pause_node_of`]; [`TestCluster::node_of`] gives
/// that node for the rest.
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::testing::TestCluster;
///
/// let cluster = TestCluster::start().await?;
/// let client = cluster.config().connect().await?;
/// let guard = client.lock("seat:7").renew(true).acquire().await?;
/// assert!(cluster.is_locked("seat:7").await);
/// cluster.expire_lock("seat:7").await; // on the node that owns its slot
/// assert_eq!(guard.lost().await, distlock::LossReason::Expired);
/// # Ok(()) }
/// ```
pub struct TestCluster {
    /// The masters, in the order of the slot ranges they serve.
    nodes: Vec<TestRedis>,
    /// Removed when the cluster is dropped, after its processes.
    _dir: Folder,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("nodes", &self.urls())
            .finish()
    }
}

impl TestCluster {
    /// Starts 3 masters with cluster mode on, gives each a third of the slots and waits until
    /// every node says the cluster is up (`cluster_state:ok`, all 16384 slots served).
    ///
    /// # Errors
    ///
    /// When `redis-server` (or `sh`) cannot be run, or the cluster is not up within 30 s; the
    /// message says which.
    pub async fn start() -> std::io::Result<TestCluster> {
        let dir = Folder::new("cluster")?;
        let mut nodes = Vec::new();
        for i in 0..MASTERS {
            let data = dir.path().join(i.to_string());
            std::fs::create_dir_all(&data)?;
            let args = [
                "--dir",
                &data.display().to_string(),
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "5000",
            ]
            .map(str::to_owned);
            nodes.push(TestRedis::start_with(&args)?);
        }
        let urls: Vec<String> = nodes.iter().map(|n| n.url().to_owned()).collect();
        for node in &mut nodes {
            node.set_cluster(urls.clone());
        }
        let cluster = TestCluster { nodes, _dir: dir };
        for (i, node) in cluster.nodes.iter().enumerate() {
            let range = slots_of(i);
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(range.start)
                .arg(range.end - 1)
                .query_async(&mut node.connection().await)
                .await
                .map_err(io)?;
        }
        let mut first = cluster.nodes[0].connection().await;
        for node in &cluster.nodes[1..] {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .query_async(&mut first)
                .await
                .map_err(io)?;
        }
        until(SETTLE_WITHIN, "the cluster to be up on every node", || {
            cluster.is_up()
        })
        .await?;
        Ok(cluster)
    }

    /// True once every node knows every master and serves the whole slot map.
    async fn is_up(&self) -> Option<()> {
        for node in &self.nodes {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut node.connection().await)
                .await
                .ok()?;
            let has = |line: &str| info.lines().any(|l| l.trim() == line);
            let known = format!("cluster_known_nodes:{MASTERS}");
            let slots = format!("cluster_slots_ok:{SLOTS}");
            if !(has("cluster_state:ok") && has(&known) && has(&slots)) {
                return None;
            }
        }
        Some(())
    }

    /// Every node's URL, `redis://127.0.0.1:<port>/`: the seed nodes of a client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url().to_owned()).collect()
    }

    /// A configuration for this cluster (the defaults of [`Config::cluster`] over every node),
    /// to connect or install a client of your own.
    pub fn config(&self) -> Config {
        Config::cluster(self.urls())
    }

    /// The masters, in the order of the slot ranges they serve (each a [`TestRedis`]: its
    /// [`pid`](TestRedis::pid), [`pause`](TestRedis::pause), ...).
    pub fn nodes(&self) -> &[TestRedis] {
        &self.nodes
    }

    /// The node that owns the slot of the lock `name` (under any key prefix: a lock's keys
    /// share the slot of its name).
    ///
    /// # Panics
    ///
    /// If `name` is not a valid lock name.
    pub fn node_of(&self, name: &str) -> &TestRedis {
        let slot = hash_slot(lock_key("distlock", name).as_bytes());
        let i = (0..self.nodes.len())
            .find(|&i| slots_of(i).contains(&slot))
            .unwrap_or(0);
        &self.nodes[i]
    }

    /// True if the lock `name` (under the default key prefix) is held right now, by anyone,
    /// as [`TestRedis::is_locked`] says on the node that owns its slot.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::is_locked`].
    pub async fn is_locked(&self, name: &str) -> bool {
        self.node_of(name).is_locked(name).await
    }

    /// How many waiters are queued for the lock `name`, as [`TestRedis::queued`] says on the
    /// node that owns its slot.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::queued`].
    pub async fn queued(&self, name: &str) -> usize {
        self.node_of(name).queued(name).await
    }

    /// [`TestRedis::expire_lock`] on the node that owns the lock's slot: its holder is told
    /// [`Expired`](crate::LossReason::Expired) within a round trip.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::expire_lock`].
    pub async fn expire_lock(&self, name: &str) {
        self.node_of(name).expire_lock(name).await;
    }

    /// [`TestRedis::steal_lock`] on the node that owns the lock's slot (the new holder is a
    /// client of the whole cluster): its holder is told [`Stolen`](crate::LossReason::Stolen)
    /// within a round trip.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::steal_lock`].
    pub async fn steal_lock(&self, name: &str) -> NewHolder {
        self.node_of(name).steal_lock(name).await
    }

    /// [`TestRedis::pause`] of the node that owns the lock's slot: nothing answers for the
    /// names of its slots until the guard is dropped; the other nodes serve theirs.
    pub fn pause_node_of(&self, name: &str) -> Paused<'_> {
        self.node_of(name).pause()
    }
}

/// The slots master `i` serves: a third of them each, the last one the rest.
fn slots_of(i: usize) -> Range<u16> {
    let per = SLOTS / MASTERS;
    let i = u16::try_from(i).unwrap_or(MASTERS - 1);
    let start = i * per;
    let end = if i + 1 == MASTERS { SLOTS } else { start + per };
    start..end
}
