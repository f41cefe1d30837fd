//! Master switches: the task that listens to the sentinels' `+switch-master` announcements
//! and asks one of them every [`CHECK_EVERY`] which master it names, counting each switch in
//! [`Sentinels::switches`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use crate::deploy::sentinel::sentinels::Sentinels;
use crate::metrics::{self, ServerEvent};
use crate::sync;

/// The channel on which sentinels announce a new master.
const SWITCH_CHANNEL: &str = "+switch-master";

/// Pause before asking the sentinels again when none could be listened to.
const WATCH_RETRY: Duration = Duration::from_millis(500);

/// How often the sentinel listened to is asked which master it names, besides its
/// `+switch-master` announcements: a switch whose announcement was missed (it happened while
/// this client was connecting, or the message was lost) is noticed within this time.
const CHECK_EVERY: Duration = Duration::from_millis(500);

impl Sentinels {
    /// Starts (once, on the current runtime) the task that listens to the sentinels'
    /// `+switch-master` announcements, so connections leave a demoted master as soon as the
    /// sentinels switch, not when Sentinel gets round to reconfiguring it (seconds later; it
    /// accepts writes until then).
    pub(super) fn watch(self: &Arc<Self>) {
        if !self.watching.swap(true, Ordering::AcqRel) {
            metrics::server_events_watched(&[ServerEvent::MasterSwitch]);
            drop(tokio::spawn(watch_switches(Arc::downgrade(self))));
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
