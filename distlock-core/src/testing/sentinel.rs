//! [`TestSentinel`]: a Redis Sentinel deployment for tests (a master, its replica and one
//! sentinel, each a supervised `redis-server` as [`TestRedis`] is) and its failovers.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::client::Client;
use crate::config::Config;
use crate::testing::process::{failed, Supervised};
use crate::testing::server::{lock_key, TestRedis};
use crate::testing::settle::{io, until, Folder};

/// How long the group may take to settle: replication up, the sentinel knowing the replica,
/// a failover over (Sentinel's own steps take a second or two).
const SETTLE_WITHIN: Duration = Duration::from_secs(30);

/// How long a client may take to follow a failover and confirm its leases on the new master
/// (it asks the sentinel every 500 ms, besides listening to its announcements).
const FOLLOW_WITHIN: Duration = Duration::from_secs(10);

/// The key [`in_sync`] writes (and deletes at once) to see the replica acknowledge a write.
const SYNC_KEY: &str = "distlock-testing:sync";

/// A Redis Sentinel deployment on free loopback ports: a master, one replica and one sentinel
/// (quorum 1; its configuration in a temporary folder of its own), stopped when dropped (or
/// when the test process exits). Connect through it with [`TestSentinel::config`], as a
/// service configures [`Config::sentinel`]. Its servers are [`TestRedis`]es: pause the
/// master, expire or steal a lock on it, as on any test server.
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::testing::TestSentinel;
///
/// let group = TestSentinel::start().await?;
/// let client = group.config().connect().await?;
/// let guard = client.lock("job").min_replicas(1).renew(true).acquire().await?;
/// group.failover_seen_by(&client).await; // the replica is the master, the client follows it
/// guard.ensure_held()?; // acknowledged by the replica: kept through the failover
/// group.failover_losing("job").await; // to a replica that missed the lock
/// assert_eq!(guard.lost().await, distlock::LossReason::Expired);
/// # Ok(()) }
/// ```
pub struct TestSentinel {
    sentinel: Supervised,
    sentinel_port: u16,
    /// The master first, as started; a failover swaps their roles, not their places.
    servers: [TestRedis; 2],
    /// Removed when the group is dropped, after its processes.
    _dir: Folder,
}

impl std::fmt::Debug for TestSentinel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestSentinel")
            .field("sentinel", &self.sentinel_url())
            .field("sentinel_pid", &self.sentinel.pid())
            .field("servers", &self.servers)
            .finish()
    }
}

impl TestSentinel {
    /// The service (master name) the sentinel watches.
    pub const SERVICE: &'static str = "distlock-testing";

    /// Starts the master, its replica (and waits until it is in sync) and the sentinel, and
    /// waits until the sentinel knows the replica as one it can promote.
    ///
    /// # Errors
    ///
    /// When a process cannot be started (as [`TestRedis::start`]), or the group does not
    /// settle within 30 s.
    pub async fn start() -> std::io::Result<TestSentinel> {
        let dir = Folder::new("sentinel")?;
        let data = |name: &str| -> std::io::Result<Vec<String>> {
            let dir = dir.path().join(name);
            std::fs::create_dir_all(&dir)?;
            // A replica loads the master's snapshot from the socket, never from a file.
            Ok([
                "--dir",
                &dir.display().to_string(),
                "--repl-diskless-sync",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
                "--repl-diskless-load",
                "swapdb",
            ]
            .map(str::to_owned)
            .into())
        };
        let master = TestRedis::start_with(&data("a")?)?;
        let mut replica_args = data("b")?;
        replica_args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port().to_string(),
        ]);
        let replica = TestRedis::start_with(&replica_args)?;
        // In sync before the sentinel starts: its first look at the master finds the replica
        // (it looks again only every 10 s).
        until(SETTLE_WITHIN, "the replica to sync", || async {
            in_sync(&master).await
        })
        .await?;
        let sentinel_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let file = dir.path().join("sentinel.conf");
        let service = Self::SERVICE;
        std::fs::write(
            &file,
            format!(
                "port {sentinel_port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                 logfile \"\"\ndir {dir}\n\
                 sentinel monitor {service} 127.0.0.1 {master} 1\n\
                 sentinel down-after-milliseconds {service} 5000\n\
                 sentinel failover-timeout {service} 10000\n\
                 sentinel parallel-syncs {service} 1\n",
                dir = dir.path().display(),
                master = master.port(),
            ),
        )?;
        let args = [file.display().to_string(), "--sentinel".to_owned()];
        let sentinel = Supervised::start(&args, "+monitor master")?;
        let group = TestSentinel {
            sentinel,
            sentinel_port,
            servers: [master, replica],
            _dir: dir,
        };
        until(SETTLE_WITHIN, "the sentinel to know the replica", || {
            group.has_replica_to_promote()
        })
        .await?;
        Ok(group)
    }

    /// The sentinel's URL, `redis://127.0.0.1:<port>`.
    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    /// A configuration that finds the master through the sentinel ([`Config::sentinel`]), to
    /// connect or install a client.
    pub fn config(&self) -> Config {
        Config::sentinel([self.sentinel_url()], Self::SERVICE)
    }

    /// The master the sentinel names now.
    ///
    /// # Panics
    ///
    /// If the sentinel cannot be asked, or names neither server of the group.
    pub async fn master(&self) -> &TestRedis {
        let port = self.named_master().await;
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| {
                panic!("distlock::testing: the sentinel names {port}, not a server of the group")
            })
    }

    /// The replica: the server the sentinel does not name as the master.
    ///
    /// # Panics
    ///
    /// As [`TestSentinel::master`].
    pub async fn replica(&self) -> &TestRedis {
        let master = self.master().await.port();
        let [a, b] = &self.servers;
        if a.port() == master {
            b
        } else {
            a
        }
    }

    /// Fails the master over (`SENTINEL FAILOVER`: the replica is promoted, the old master
    /// made its replica), and returns once the sentinel names the new master, it says it is
    /// one (`ROLE`) and the old master replicates it. A client follows by itself (on the
    /// sentinel's announcement, or when it next asks, within 500 ms) and confirms every lease
    /// on the new master: a lock the replica had (taken with `min_replicas`, say) is kept; one
    /// it had not is lost, and its holder told. [`TestSentinel::failover_seen_by`] also waits
    /// for a client to follow.
    ///
    /// # Panics
    ///
    /// If the sentinel refuses or the group does not settle within 30 s.
    pub async fn failover(&self) {
        let settled = async {
            let old = self.named_master().await;
            until(SETTLE_WITHIN, "a replica to promote", || {
                self.has_replica_to_promote()
            })
            .await?;
            let mut sentinel = self.sentinel_connection().await?;
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(Self::SERVICE)
                .exec_async(&mut sentinel)
                .await
                .map_err(|e| failed(format!("SENTINEL FAILOVER: {e}")))?;
            let promoted = || async {
                let new = self.named_master().await;
                let server = self.servers.iter().find(|s| s.port() == new)?;
                (new != old && is_master(server).await).then_some(server)
            };
            let new = until(SETTLE_WITHIN, "the replica to be promoted", promoted).await?;
            // What the sentinel does next, a few seconds later: the old master replicates the
            // new one. Done here at once, so the group is ready for the next failover.
            let old = self.servers.iter().find(|s| s.port() != new.port());
            if let Some(old) = old {
                redis::cmd("REPLICAOF")
                    .arg("127.0.0.1")
                    .arg(new.port())
                    .exec_async(&mut old.connection().await)
                    .await
                    .map_err(|e| failed(format!("REPLICAOF on the old master: {e}")))?;
            }
            until(SETTLE_WITHIN, "the old master to sync", || in_sync(new)).await
        };
        if let Err(e) = settled.await {
            panic!("distlock::testing: failover: {e}");
        }
    }

    /// [`TestSentinel::failover`], then waits until `client` has followed it (it saw the
    /// master switch) and confirmed every lease it holds on the new master: a lease it still
    /// believes in after this is one the new master holds.
    ///
    /// # Panics
    ///
    /// As [`TestSentinel::failover`], and if the client has not followed within 10 s.
    pub async fn failover_seen_by(&self, client: &Client) {
        let before = client.master_switches();
        self.failover().await;
        let followed = || async {
            (client.master_switches() > before && client.leases_confirmed()).then_some(())
        };
        if let Err(e) = until(FOLLOW_WITHIN, "the client to follow the failover", followed).await {
            panic!("distlock::testing: failover_seen_by: {e}");
        }
    }

    /// Fails the master over to a replica that had not received the lock `name` (under the
    /// default key prefix), as asynchronous replication can leave it when the master fails
    /// right after the lock was taken: the lock is deleted on the replica (made writable for
    /// that moment), then [`TestSentinel::failover`]. Its holder's client confirms its leases
    /// on the new master once it follows the failover, finds the lock gone and tells the
    /// holder [`LossReason::Expired`] (its body cancelled): what `min_replicas` is there to
    /// prevent, shown.
    ///
    /// [`LossReason::Expired`]: crate::LossReason::Expired
    ///
    /// # Panics
    ///
    /// If nobody holds the lock, or as [`TestSentinel::failover`].
    pub async fn failover_losing(&self, name: &str) {
        let key = lock_key("distlock", name);
        let replica = self.replica().await;
        let lost = async {
            // The replica has everything the master wrote so far, the lock among them.
            until(SETTLE_WITHIN, "the replica to sync", || async {
                in_sync(self.master().await).await
            })
            .await?;
            let mut conn = replica.connection().await;
            let set_read_only = |value: &'static str| {
                let mut set = redis::cmd("CONFIG");
                set.arg("SET").arg("replica-read-only").arg(value);
                set
            };
            set_read_only("no")
                .exec_async(&mut conn)
                .await
                .map_err(io)?;
            let deleted: redis::RedisResult<u64> =
                redis::cmd("DEL").arg(&key).query_async(&mut conn).await;
            set_read_only("yes")
                .exec_async(&mut conn)
                .await
                .map_err(io)?;
            match deleted.map_err(io)? {
                1 => Ok(()),
                _ => Err(failed(format!(
                    "nobody holds the lock (no key {key} on the replica); take it first"
                ))),
            }
        };
        if let Err(e) = lost.await {
            panic!("distlock::testing: failover_losing({name:?}): {e}");
        }
        self.failover().await;
    }

    /// The port of the master the sentinel names.
    async fn named_master(&self) -> u16 {
        let named = async {
            let mut sentinel = self.sentinel_connection().await?;
            let named: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(Self::SERVICE)
                .query_async(&mut sentinel)
                .await
                .map_err(io)?;
            named
                .map(|(_, port)| port)
                .ok_or_else(|| failed("the sentinel names no master".to_owned()))
        };
        named
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: {e}"))
    }

    /// True when the sentinel knows a replica it would promote: linked to the master, and
    /// saying so itself.
    async fn has_replica_to_promote(&self) -> Option<()> {
        let mut sentinel = self.sentinel_connection().await.ok()?;
        let replicas: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(Self::SERVICE)
            .query_async(&mut sentinel)
            .await
            .ok()?;
        let field = |replica: &HashMap<String, String>, name: &str, value: &str| {
            replica.get(name).map(String::as_str) == Some(value)
        };
        replicas
            .iter()
            .any(|r| {
                field(r, "flags", "slave")
                    && field(r, "role-reported", "slave")
                    && field(r, "master-link-status", "ok")
            })
            .then_some(())
    }

    async fn sentinel_connection(&self) -> std::io::Result<MultiplexedConnection> {
        let client = redis::Client::open(self.sentinel_url()).map_err(io)?;
        client.get_multiplexed_async_connection().await.map_err(io)
    }
}

/// True (`Some`) when `master` is a master whose replica has acknowledged a write of ours (a
/// key set and deleted at once). Read from the master's own account of its replica's
/// acknowledged offset: a `WAIT` alone can answer before a replica that has just loaded its
/// first snapshot acknowledges anything (it does so a second later).
async fn in_sync(master: &TestRedis) -> Option<()> {
    let mut conn = master.connection().await;
    let mut write = redis::pipe();
    write.cmd("SET").arg(SYNC_KEY).arg("").ignore();
    write.cmd("DEL").arg(SYNC_KEY).ignore();
    write.cmd("INFO").arg("replication");
    // Asks the replica for its acknowledgement at once.
    write.cmd("WAIT").arg(1).arg(100).ignore();
    write.cmd("INFO").arg("replication");
    let (written, acked): (String, String) = write.query_async(&mut conn).await.ok()?;
    let written = info_field(&written, "master_repl_offset")?;
    // `slave0:ip=127.0.0.1,port=6380,state=online,offset=1234,lag=0`
    let replica = info_field(&acked, "slave0")?;
    let part = |name: &str| {
        let prefix = format!("{name}=");
        replica
            .split(',')
            .find_map(|part| part.strip_prefix(prefix.as_str()))
            .map(str::to_owned)
    };
    let acked: u64 = part("offset")?.parse().ok()?;
    // Before the replica is attached the master writes no replication stream (its offset
    // stays 0), and a replica still syncing has acknowledged nothing.
    let online = part("state")? == "online";
    (online && acked > 0 && acked >= written.parse().ok()?).then_some(())
}

/// The value of `name` in an `INFO` reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// True when `server` says it is a master (`ROLE`).
async fn is_master(server: &TestRedis) -> bool {
    let role: redis::RedisResult<Vec<redis::Value>> = redis::cmd("ROLE")
        .query_async(&mut server.connection().await)
        .await;
    matches!(role.ok().and_then(|r| r.into_iter().next()), Some(redis::Value::BulkString(b)) if b == b"master")
}
