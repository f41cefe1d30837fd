//! Redis Sentinel: finding the master of a service, and connections that follow it.
//!
//! The sentinels are asked in order (`SENTINEL GET-MASTER-ADDR-BY-NAME <service>`); the first
//! address they give whose server answers `ROLE` as a master is the master. redis-rs's own
//! `SentinelClient` hands out connections to a fixed address, so after a failover nothing
//! would move them; here a connection is found afresh whenever it must be:
//!
//! * the command connection ([`MasterLink`]) finds the master on first use; `connection`
//!   replaces it (with a fresh, unconnected one) when it fails, or when the node answers
//!   `READONLY` (a demoted master), see [`follows_master_after`];
//! * the subscriber ([`MasterSubscriber`]) reconnects to the master found then, and subscribes
//!   again to every channel its waiters listen on, as soon as its connection drops (Sentinel
//!   disconnects the clients of every node it reconfigures).
//!
//! Every search is bounded: each sentinel and the master get the connect timeout and the
//! response timeout, and while a master is being promoted (sentinels name a node that is not a
//! master yet, or not reachable) the sentinels are asked again for at most one response
//! timeout. Callers bound it further by their own timeouts.

mod link;
mod members;
mod subscriber;

pub(crate) use link::MasterLink;
use members::{Members, ReplicaEntry};
pub(crate) use subscriber::MasterSubscriber;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::{AsyncPushSender, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, ProtocolVersion, PushInfo,
    PushKind, RedisConnectionInfo, RedisError, RedisResult, Value,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::AddressMap;
use crate::error::is_connection_failure;
use crate::metrics::{self, ServerEvent};
use crate::sync;

/// Pause between two rounds of questions while a failover is under way.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The channel on which sentinels announce a new master.
const SWITCH_CHANNEL: &str = "+switch-master";

/// Pause before asking the sentinels again when none could be listened to.
const WATCH_RETRY: Duration = Duration::from_millis(500);

/// How often the sentinel listened to is asked which master it names, besides its
/// `+switch-master` announcements: a switch whose announcement was missed (it happened while
/// this client was connecting, or the message was lost) is noticed within this time.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Makes the redis-rs client for one address (with the configured TLS certificates).
pub(crate) type OpenClient = dyn Fn(ConnectionInfo) -> RedisResult<redis::Client> + Send + Sync;

/// The sentinels of one service, and how to reach the master they name.
pub(crate) struct Sentinels {
    /// Each sentinel's connection info (its address, TLS mode and own credentials) and client.
    sentinels: Vec<(ConnectionInfo, redis::Client)>,
    service: String,
    /// The master's credentials (the sentinels' are in their URLs).
    master: RedisConnectionInfo,
    open: Box<OpenClient>,
    /// Where to reach an address the sentinels announce, when not there
    /// (`Config::sentinel_address_map`).
    address_map: AddressMap,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// How many times the sentinels announced a new master for the service
    /// (`+switch-master`), as seen by the task [`Sentinels::watch`] starts.
    switches: watch::Sender<u64>,
    /// The new master's address in the latest announcement: asked first, before the
    /// sentinels that may not have heard of the switch yet.
    announced: RwLock<Option<(String, u16)>>,
    /// The master the latest connection was made to (confirmed by `ROLE` and by the sentinel
    /// that named it): a sentinel naming another address is a switch.
    connected: RwLock<Option<(String, u16)>>,
    /// What `min_replicas = ALL_REPLICAS` waits for, asked with every check of the named master
    /// (see [`Sentinels::count_healthy`]).
    healthy: RwLock<Option<Members>>,
    /// Some lock asked for `ALL_REPLICAS`: from then on the replicas are asked about with
    /// every check of the named master (before, only once, at connect).
    wants_members: AtomicBool,
    watching: AtomicBool,
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
    async fn count_healthy(&self, conn: &mut MultiplexedConnection) {
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
    async fn refresh_healthy(&self) {
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

    /// Counts a switch to `address` (announced by the sentinels, or found by asking them). The
    /// metric counts a failover once: a switch to the master already announced (found by
    /// asking before the connection moved there) is the same one.
    fn switched(&self, address: Option<(String, u16)>) {
        let again = {
            let mut announced = sync::write(&self.announced);
            let again = address.is_some() && *announced == address;
            *announced = address;
            again
        };
        if !again {
            metrics::server_event(ServerEvent::MasterSwitch);
        }
        self.switches.send_modify(|n| *n += 1);
    }

    /// Starts (once, on the current runtime) the task that listens to the sentinels'
    /// `+switch-master` announcements, so connections leave a demoted master as soon as the
    /// sentinels switch, not when Sentinel gets round to reconfiguring it (seconds later; it
    /// accepts writes until then).
    fn watch(self: &Arc<Self>) {
        if !self.watching.swap(true, Ordering::AcqRel) {
            metrics::server_events_watched(&[ServerEvent::MasterSwitch]);
            drop(tokio::spawn(watch_switches(Arc::downgrade(self))));
        }
    }

    fn connection_config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
    }

    /// A connection to the service's master (confirmed by `ROLE`), speaking `protocol`, its
    /// pushes sent to `pushes`.
    ///
    /// # Errors
    ///
    /// `MasterNameNotFoundBySentinel` when every sentinel that answered does not know the
    /// service; otherwise an I/O error (a connection failure, so a transient one) naming the
    /// service and the last thing that went wrong.
    pub(crate) async fn connect_master(
        &self,
        protocol: ProtocolVersion,
        pushes: Option<Arc<dyn AsyncPushSender>>,
    ) -> RedisResult<MultiplexedConnection> {
        let retry_until = Instant::now() + self.response_timeout;
        loop {
            let mut last = None;
            // A sentinel named a master that could not be used: a failover may be under way.
            let mut promoting = false;
            let announced = sync::read(&self.announced).clone();
            if let (Some((host, port)), Some(first)) = (announced, self.sentinels.first()) {
                match self
                    .open_master(first, &host, port, protocol, &pushes)
                    .await
                {
                    Ok(conn) => return Ok(conn),
                    Err(error) => last = Some(error),
                }
            }
            for named_by in &self.sentinels {
                let (host, port) = match self.ask(&named_by.1).await {
                    Ok(Some(address)) => address,
                    Ok(None) => {
                        last = Some(RedisError::from((
                            ErrorKind::MasterNameNotFoundBySentinel,
                            "the sentinels do not know this service",
                            format!("`{}`", self.service),
                        )));
                        continue;
                    }
                    Err(error) => {
                        last = Some(error);
                        continue;
                    }
                };
                match self
                    .open_master(named_by, &host, port, protocol, &pushes)
                    .await
                {
                    Ok(conn) => return Ok(conn),
                    // The master is there and refuses these credentials: no failover mends that.
                    Err(error) if is_refused_login(&error) => return Err(error),
                    Err(error) => {
                        promoting = true;
                        last = Some(error);
                    }
                }
            }
            if !promoting || Instant::now() + RETRY_PAUSE >= retry_until {
                return Err(self.no_master(last));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// The master's address according to one sentinel (`None`: it does not know the service).
    async fn ask(&self, sentinel: &redis::Client) -> RedisResult<Option<(String, u16)>> {
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&self.connection_config())
            .await?;
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query_async(&mut conn)
            .await
    }

    /// A connection to `host:port`, if it is a master (with the TLS mode of the sentinel that
    /// named it) and, once it said so, that sentinel still names it: a master frozen through a
    /// failover resumes believing it is one, and the `ROLE` check may be what waited for it.
    async fn open_master(
        &self,
        (sentinel, named_by): &(ConnectionInfo, redis::Client),
        host: &str,
        port: u16,
        protocol: ProtocolVersion,
        pushes: &Option<Arc<dyn AsyncPushSender>>,
    ) -> RedisResult<MultiplexedConnection> {
        // Where the announced address is reached (the map), not what it is called.
        let (dial_host, dial_port) = self
            .address_map
            .get(&(host.to_owned(), port))
            .cloned()
            .unwrap_or_else(|| (host.to_owned(), port));
        let addr = match sentinel.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: dial_host,
                port: dial_port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(dial_host, dial_port),
        };
        let info = sentinel
            .clone()
            .set_addr(addr)
            .set_redis_settings(self.master.clone().set_protocol(protocol));
        let mut config = self.connection_config();
        match pushes {
            Some(pushes) => config = config.set_push_sender(pushes.clone()),
            // The command connection: `connection` bounds every call itself, a `WAIT` included
            // (whose replica timeout may exceed the response timeout).
            None => config = config.set_response_timeout(None),
        }
        let mut conn = (self.open)(info)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let ask_role = redis::cmd("ROLE");
        let role = ask_role.query_async::<Value>(&mut conn);
        let role = tokio::time::timeout(self.response_timeout, role)
            .await
            .map_err(|_| {
                RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{host}:{port} did not answer ROLE"),
                ))
            })??;
        if !is_master(&role) {
            return Err(RedisError::from((
                ErrorKind::Io,
                "the node the sentinels named is not a master (yet)",
                format!("{host}:{port}"),
            )));
        }
        let still = self.ask(named_by).await?;
        if still.as_ref().is_some_and(|(h, p)| h == host && *p == port) {
            *sync::write(&self.connected) = still;
            return Ok(conn);
        }
        Err(RedisError::from((
            ErrorKind::Io,
            "the sentinels no longer name this master (it was superseded while it was checked)",
            format!("{host}:{port}"),
        )))
    }

    /// The error when no master was found: the sentinels' own answer for an unknown service,
    /// otherwise a connection failure (transient: a failover, unreachable sentinels).
    fn no_master(&self, last: Option<RedisError>) -> RedisError {
        if let Some(error) = &last {
            if error.kind() == ErrorKind::MasterNameNotFoundBySentinel {
                return error.clone();
            }
        }
        let why = match &last {
            Some(error) => match error.detail() {
                Some(detail) => format!("{}: {detail}", error.category()),
                None => error.to_string(),
            },
            None => "no sentinel is configured".to_owned(),
        };
        RedisError::from((
            ErrorKind::Io,
            "no master found through Sentinel",
            format!("service `{}`: {why}", self.service),
        ))
    }
}

/// True when a server refused the client's credentials (or wanted some).
fn is_refused_login(error: &RedisError) -> bool {
    error.kind() == ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

/// True for a `ROLE` reply of a master (`["master", offset, replicas]`).
fn is_master(role: &Value) -> bool {
    let Value::Array(fields) = role else {
        return false;
    };
    match fields.first() {
        Some(Value::BulkString(role)) => role == b"master",
        Some(Value::SimpleString(role)) => role == "master",
        _ => false,
    }
}

/// True if a command connection that failed with `error` must be replaced by one to the
/// master found afresh: it dropped (a failover disconnects every client), or its node is no
/// longer the master (`READONLY`).
pub(crate) fn follows_master_after(error: &RedisError) -> bool {
    is_connection_failure(error) || error.code() == Some("READONLY")
}

/// Listens to the sentinels' `+switch-master` channel (on the first sentinel that answers) and
/// counts the switches of this service in [`Sentinels::switches`]. A lost sentinel connection
/// counts as a switch (one may have been missed), and the next sentinel is asked. Ends with
/// the sentinels.
async fn watch_switches(sentinels: Weak<Sentinels>) {
    let mut first = true;
    loop {
        let Some(this) = sentinels.upgrade() else {
            return;
        };
        let (pushes, mut messages) = mpsc::unbounded_channel::<PushInfo>();
        let mut listening = None;
        for (info, _) in &this.sentinels {
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            let subscribe = async {
                let client = (this.open)(info.clone().set_redis_settings(settings))?;
                let config = this.connection_config().set_push_sender(pushes.clone());
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                conn.subscribe(SWITCH_CHANNEL).await?;
                RedisResult::Ok(conn)
            };
            if let Ok(conn) = subscribe.await {
                listening = Some(conn);
                break;
            }
        }
        let service = this.service.clone().into_bytes();
        let weak = Arc::downgrade(&this);
        drop(this);
        let Some(mut conn) = listening else {
            tokio::time::sleep(WATCH_RETRY).await;
            continue;
        };
        if !std::mem::take(&mut first) {
            if let Some(this) = weak.upgrade() {
                this.switches.send_modify(|n| *n += 1);
            }
        }
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let push = tokio::select! {
                push = messages.recv() => match push {
                    Some(push) => push,
                    None => break,
                },
                _ = check.tick() => {
                    let Some(this) = weak.upgrade() else {
                        return;
                    };
                    if !this.still_named(&mut conn).await {
                        break;
                    }
                    continue;
                }
            };
            match push.kind {
                PushKind::Message => {
                    // `<service> <old ip> <old port> <new ip> <new port>`
                    if let Some(Value::BulkString(text)) = push.data.get(1) {
                        let text = String::from_utf8_lossy(text);
                        let words: Vec<&str> = text.split(' ').collect();
                        let Some(this) = weak.upgrade() else {
                            return;
                        };
                        if words.first().map(|w| w.as_bytes()) == Some(&service[..]) {
                            tracing::info!(announcement = %text, "Sentinel switched the master");
                            let address = match (words.get(3), words.get(4)) {
                                (Some(host), Some(port)) => {
                                    port.parse().ok().map(|port| (host.to_string(), port))
                                }
                                _ => None,
                            };
                            this.switched(address);
                        }
                    }
                }
                PushKind::Disconnection => break,
                _ => {}
            }
        }
    }
}

impl Sentinels {
    /// Asks the sentinel listened to (on its subscribed connection) which master it names; a
    /// master other than the one connected to counts as a switch. False if the sentinel did
    /// not answer (the caller listens to another one).
    async fn still_named(&self, conn: &mut MultiplexedConnection) -> bool {
        let mut ask = redis::cmd("SENTINEL");
        ask.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.service);
        let ask = ask.query_async::<Option<(String, u16)>>(conn);
        let named = match tokio::time::timeout(self.response_timeout, ask).await {
            Ok(Ok(named)) => named,
            _ => return false,
        };
        let connected = sync::read(&self.connected).clone();
        if let (Some(named), Some(connected)) = (named, connected) {
            if named != connected {
                tracing::warn!(
                    named = %format!("{}:{}", named.0, named.1),
                    connected = %format!("{}:{}", connected.0, connected.1),
                    "the sentinels name another master than the one connected to: following it"
                );
                *sync::write(&self.connected) = None;
                self.switched(Some(named));
                return true;
            }
        }
        if self.wants_members.load(Ordering::Relaxed) {
            self.count_healthy(conn).await;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles() {
        let master = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(0),
            Value::Array(vec![]),
        ]);
        assert!(is_master(&master));
        let replica = Value::Array(vec![
            Value::BulkString(b"slave".to_vec()),
            Value::BulkString(b"127.0.0.1".to_vec()),
        ]);
        assert!(!is_master(&replica));
        assert!(!is_master(&Value::Nil));
    }

    #[test]
    fn what_moves_a_command_connection() {
        let dropped = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert!(follows_master_after(&dropped));
        let readonly = redis::make_extension_error(
            "READONLY".to_owned(),
            Some("You can't write against a read only replica.".to_owned()),
        );
        assert!(follows_master_after(&readonly), "{readonly:?}");
        let other = redis::make_extension_error("NOSCRIPT".to_owned(), None);
        assert!(!follows_master_after(&other));
        let refused = redis::make_extension_error("WRONGPASS".to_owned(), None);
        assert!(is_refused_login(&refused) && !is_refused_login(&readonly));
    }
}
