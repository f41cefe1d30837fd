//! The sentinels of one service: how to reach them and the master they name, what they told
//! so far (the master connected to, the switches counted, the healthy replicas) and the
//! timeouts of every connection made to them or to the master.

use std::sync::atomic::AtomicBool;
use std::sync::RwLock;
use std::time::Duration;

use redis::{AsyncConnectionConfig, ConnectionInfo, RedisConnectionInfo, RedisResult};
use tokio::sync::watch;

use crate::config::AddressMap;
use crate::deploy::sentinel::members::Members;

/// Makes the redis-rs client for one address (with the configured TLS certificates).
pub(crate) type OpenClient = dyn Fn(ConnectionInfo) -> RedisResult<redis::Client> + Send + Sync;

/// The sentinels of one service, and how to reach the master they name.
pub(crate) struct Sentinels {
    /// Each sentinel's connection info (its address, TLS mode and own credentials) and client.
    pub(super) sentinels: Vec<(ConnectionInfo, redis::Client)>,
    pub(super) service: String,
    /// The master's credentials (the sentinels' are in their URLs).
    pub(super) master: RedisConnectionInfo,
    pub(super) open: Box<OpenClient>,
    /// Where to reach an address the sentinels announce, when not there
    /// (`Config::sentinel_address_map`).
    pub(super) address_map: AddressMap,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    /// How many times the sentinels announced a new master for the service
    /// (`+switch-master`), as seen by the task [`Sentinels::watch`] starts.
    pub(super) switches: watch::Sender<u64>,
    /// The new master's address in the latest announcement: asked first, before the
    /// sentinels that may not have heard of the switch yet.
    pub(super) announced: RwLock<Option<(String, u16)>>,
    /// The master the latest connection was made to (confirmed by `ROLE` and by the sentinel
    /// that named it): a sentinel naming another address is a switch.
    pub(super) connected: RwLock<Option<(String, u16)>>,
    /// What `min_replicas = ALL_REPLICAS` waits for, asked with every check of the named master
    /// (see [`Sentinels::count_healthy`]).
    pub(super) healthy: RwLock<Option<Members>>,
    /// Some lock asked for `ALL_REPLICAS`: from then on the replicas are asked about with
    /// every check of the named master (before, only once, at connect).
    pub(super) wants_members: AtomicBool,
    /// The task counting switches was started ([`Sentinels::watch`]).
    pub(super) watching: AtomicBool,
}

impl Sentinels {
    /// The sentinels at `sentinels` watching `service`; nothing is connected yet.
    pub(crate) fn new(
        sentinels: Vec<ConnectionInfo>,
        service: &str,
        master: RedisConnectionInfo,
        open: Box<OpenClient>,
        address_map: AddressMap,
        timeouts: (Duration, Duration),
    ) -> RedisResult<Sentinels> {
        let sentinels = sentinels
            .into_iter()
            .map(|info| Ok((info.clone(), open(info)?)))
            .collect::<RedisResult<_>>()?;
        Ok(Sentinels {
            sentinels,
            service: service.to_owned(),
            master,
            open,
            address_map,
            connect_timeout: timeouts.0,
            response_timeout: timeouts.1,
            switches: watch::Sender::new(0),
            announced: RwLock::new(None),
            connected: RwLock::new(None),
            healthy: RwLock::new(None),
            wants_members: AtomicBool::new(false),
            watching: AtomicBool::new(false),
        })
    }

    /// Master switches seen so far: a connection made before the latest one is to the old
    /// master. Every reply that extends a lease is checked against it (see `watchdog`): a reply
    /// that arrives after a switch may come from a master already superseded.
    pub(crate) fn switches(&self) -> u64 {
        *self.switches.borrow()
    }

    /// Woken at every switch (see [`Sentinels::switches`]).
    pub(crate) fn subscribe_switches(&self) -> watch::Receiver<u64> {
        self.switches.subscribe()
    }

    /// The timeouts of every connection to a sentinel or a master.
    pub(super) fn connection_config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
    }
}
