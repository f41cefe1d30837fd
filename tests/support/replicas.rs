//! Replication of one server: replicas started and synced, counted online, a server demoted
//! to a replica of nobody and promoted again, its error replies counted.

use std::time::Duration;

use crate::server::{free_port, RedisServer, ServerOptions, READY_WITHIN};

impl RedisServer {
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

    /// Demotes the server to a replica of a master that does not exist (a failover that has not
    /// settled): it answers reads, and every write with `READONLY`, until [`Self::promote`].
    pub async fn demote(&self) {
        redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(free_port())
            .exec_async(&mut self.conn().await)
            .await
            .expect("REPLICAOF");
    }

    /// Makes a demoted server a master again (`REPLICAOF NO ONE`), its data kept.
    pub async fn promote(&self) {
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .exec_async(&mut self.conn().await)
            .await
            .expect("REPLICAOF NO ONE");
    }

    /// How many times the server answered with error `code` (`READONLY`, `LOADING`, …) since
    /// it started (`INFO errorstats`).
    pub async fn error_replies(&self, code: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query_async(&mut self.conn().await)
            .await
            .expect("INFO errorstats");
        let prefix = format!("errorstat_{code}:count=");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|n| n.split(',').next()?.trim().parse().ok())
            .unwrap_or(0)
    }
}
