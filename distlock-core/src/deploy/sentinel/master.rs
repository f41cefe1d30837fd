//! Finding the master of a service: the sentinels asked in order, the address they name
//! confirmed by `ROLE` and by the same sentinel still naming it, retried while a failover is
//! under way; and which failures must send a command connection to the master found afresh.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{AsyncPushSender, MultiplexedConnection};
use redis::{
    ConnectionAddr, ConnectionInfo, ErrorKind, ProtocolVersion, RedisError, RedisResult, Value,
};
use tokio::time::Instant;

use crate::deploy::sentinel::sentinels::Sentinels;
use crate::error::is_connection_failure;
use crate::sync;

/// Pause between two rounds of questions while a failover is under way.
pub(super) const RETRY_PAUSE: Duration = Duration::from_millis(50);

impl Sentinels {
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
