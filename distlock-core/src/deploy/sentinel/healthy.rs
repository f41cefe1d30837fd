//! What `min_replicas = ALL_REPLICAS` waits for: the healthy replicas of the master connected
//! to, asked of the sentinels (the members are `members`').

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::deploy::sentinel::members::{Members, ReplicaEntry};
use crate::deploy::sentinel::sentinels::Sentinels;
use crate::sync;

impl Sentinels {
    /// How many replicas a write to the master connected to now must reach for
    /// `ALL_REPLICAS`; `None` if the sentinels have not answered for this master yet (an
    /// acquire or renewal that must wait for every replica then fails as unreplicated, and is
    /// retried).
    pub(crate) fn healthy_replicas(&self) -> Option<usize> {
        self.wants_members.store(true, Ordering::Relaxed);
        let connected = sync::read(&self.connected).clone()?;
        match &*sync::read(&self.healthy) {
            Some(members) if members.master == connected => Some(members.count),
            _ => None,
        }
    }

    /// Asks the sentinel on `conn` about the replicas of the connected master. A replica
    /// becomes a *member* once it is healthy (listed as a replica, not down or disconnected,
    /// reporting itself as one, its link to the master up), and stays one for as long as the
    /// client is connected to this master unless the sentinels declare it down or drop it:
    /// a member that starts reporting itself as a master is being promoted (this master is
    /// being superseded), and it must go on counting, so that no write the promoted replica
    /// lacks is acknowledged; the old master after a switch, not yet a replica again, never
    /// became a member of the new one, so it is not waited for.
    pub(super) async fn count_healthy(&self, conn: &mut MultiplexedConnection) {
        let Some(master) = sync::read(&self.connected).clone() else {
            return;
        };
        let mut ask = redis::cmd("SENTINEL");
        ask.arg("REPLICAS").arg(&self.service);
        let listed = ask.query_async::<Vec<Value>>(conn);
        let Ok(Ok(listed)) = tokio::time::timeout(self.response_timeout, listed).await else {
            return;
        };
        let listed: Vec<ReplicaEntry> = listed.iter().filter_map(ReplicaEntry::read).collect();
        // Counted for the master still connected to (not one a switch replaced meanwhile).
        if sync::read(&self.connected).as_ref() != Some(&master) {
            return;
        }
        let mut healthy = sync::write(&self.healthy);
        let members = match healthy.take() {
            Some(members) if members.master == master => members,
            _ => Members {
                master,
                names: HashSet::new(),
                count: 0,
            },
        };
        *healthy = Some(members.updated(&listed));
    }

    /// Asks the sentinels (the first that answers) which replicas are healthy, now.
    pub(super) async fn refresh_healthy(&self) {
        for (_, sentinel) in &self.sentinels {
            let config = self.connection_config();
            if let Ok(mut conn) = sentinel
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                self.count_healthy(&mut conn).await;
                if self.healthy_replicas().is_some() {
                    return;
                }
            }
        }
    }
}
