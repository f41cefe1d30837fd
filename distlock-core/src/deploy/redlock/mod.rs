//! The masters of a RedLock quorum (`Config::redlock`): one standalone backend and command
//! connection per master, joined into one `Connection` that sends every call to all of them
//! and counts the replies by majority (the rules are `quorum`'s).

pub(crate) mod quorum;
pub(crate) mod stragglers;

use std::sync::Arc;

use crate::background::Background;
use crate::config::Config;
use crate::deploy::backend::Backend;
use crate::deploy::connection::Connection;
use crate::error::Error;

/// The quorum connection over `config`'s masters. Each master's connection is made lazily
/// (on first use, and again after a master restarts), so a client starts while a minority of
/// the masters is down; each call bounds each master by the response timeout, and returns as
/// soon as a majority decided it (the rest finish in the background, see `stragglers`).
pub(crate) fn connect(config: &Config, background: &Background) -> Result<Connection, Error> {
    let mut nodes = Vec::with_capacity(config.redlock_masters.len());
    for url in &config.redlock_masters {
        let master = Config {
            url: url.clone(),
            redlock_masters: Vec::new(),
            ..config.clone()
        };
        let backend = Arc::new(Backend::open(&master)?);
        let link = backend
            .lazy_command_link(background)
            .map_err(|source| Error::Connect {
                to: master.target(),
                source,
            })?;
        nodes.push(Arc::new(Connection::new(link, backend, background.clone())));
    }
    Ok(Connection::quorum(nodes))
}
