//! [`Connection`]: the command connection of a [`Client`], as a redis-rs connection for a
//! [`FencedStore`](super::FencedStore) (`FencedStore::with_client`): one store type for one
//! server, Sentinel and a Redis Cluster.

use std::fmt;
use std::sync::Arc;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::client::Client;
use crate::deploy::connection::Connection as Commands;
use crate::error::Error;

/// The connection a [`Client`]'s locks use, for your fenced writes and your other commands
/// (a redis-rs [`ConnectionLike`]): to one server (reconnecting by itself), to the current
/// master of a Sentinel deployment (following its failovers), or to every node of a Redis
/// Cluster (each command routed by its first key's slot, redirects followed). Made by
/// [`FencedStore::with_client`](super::FencedStore::with_client); cheap to clone.
#[derive(Clone)]
pub struct Connection {
    commands: Arc<Commands>,
    /// The client it came from, kept so its runtime (where the connection is driven) lives
    /// while the connection does.
    _client: Client,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("client", &self._client.config().redacted_url())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// `client`'s command connection; a RedLock quorum has none to give.
    pub(crate) fn of(client: &Client) -> Result<Connection, Error> {
        let commands = client.command_connection().ok_or_else(|| Error::InvalidConfig {
            reason: "`FencedStore::with_client` writes on the server of a client's locks, and a RedLock quorum's masters are independent servers, none of them the store: give `FencedStore::new` a connection of your data's server".to_owned(),
        })?;
        Ok(Connection {
            commands,
            _client: client.clone(),
        })
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        // The connection of the moment: a replaced one (a Sentinel master's switch) is taken
        // up at the next command.
        let (_, mut link) = self.commands.current();
        Box::pin(async move { link.req_packed_command(cmd).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let (_, mut link) = self.commands.current();
        Box::pin(async move { link.req_packed_commands(cmd, offset, count).await })
    }

    fn get_db(&self) -> i64 {
        self.commands.current().1.get_db()
    }
}
