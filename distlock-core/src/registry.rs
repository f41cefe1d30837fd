//! The process-wide registry of clients: one default and any number of named ones.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use crate::client::Client;
use crate::config::Config;
use crate::error::Error;
use crate::sync;

static DEFAULT: OnceLock<Client> = OnceLock::new();
static NAMED: RwLock<Option<HashMap<String, Client>>> = RwLock::new(None);

impl Config {
    /// Connects and installs the client as the default one (what [`crate::init`] does).
    ///
    /// Fails with [`Error::AlreadyInitialized`] if a default client exists.
    pub async fn install(self) -> Result<Client, Error> {
        install(self, None).await
    }

    /// Connects and installs the client under `name`, for `lock(..).client(name)` and the
    /// attribute's `client = "name"`.
    pub async fn install_as(self, name: impl Into<String>) -> Result<Client, Error> {
        install(self, Some(name.into())).await
    }
}

async fn install(config: Config, name: Option<String>) -> Result<Client, Error> {
    // Fail before connecting if the name is taken.
    ensure_free(name.as_deref())?;
    let client = Client::connect(config, name.clone()).await?;
    insert(name, client.clone())?;
    Ok(client)
}

/// Fails early (before connecting) if `name` is taken.
fn ensure_free(name: Option<&str>) -> Result<(), Error> {
    let taken = match name {
        None => DEFAULT.get().is_some(),
        Some(name) => read_named(|map| map.contains_key(name)),
    };
    if taken {
        return Err(Error::AlreadyInitialized {
            client: name.map(str::to_owned),
        });
    }
    Ok(())
}

fn insert(name: Option<String>, client: Client) -> Result<(), Error> {
    match name {
        None => DEFAULT
            .set(client)
            .map_err(|_| Error::AlreadyInitialized { client: None }),
        Some(name) => {
            let mut guard = sync::write(&NAMED);
            let map = guard.get_or_insert_with(HashMap::new);
            if map.contains_key(&name) {
                return Err(Error::AlreadyInitialized { client: Some(name) });
            }
            map.insert(name, client);
            Ok(())
        }
    }
}

/// Waits until the background work of every installed client is done (the default client's
/// and each named one's, in turn): the releases that `run` and the attribute sent without
/// waiting for their answers, releases of dropped guards, unsubscribes. Each of them is
/// bounded (by the response timeout, or a lease), so this returns. The clients keep working.
///
/// Returning from `main` needs no call: a runtime that shuts down waits, within a bound, for
/// the work its tasks started (see the crate docs, "Shutting down"). Call this before the
/// exits that skip that — [`std::process::exit`], an exit from a signal handler, a runtime
/// dropped with `shutdown_background` — or to know the releases are answered before a step of
/// your own (closing a database pool, say):
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::Error> {
/// distlock::init("redis://127.0.0.1:6379/").await?;
/// // ... serve until told to stop ...
/// distlock::shutdown().await;
/// std::process::exit(0);
/// # }
/// ```
///
/// A client connected with [`Config::connect`] and not installed is settled by its own
/// [`Client::settle`].
pub async fn shutdown() {
    let mut clients: Vec<Client> = DEFAULT.get().cloned().into_iter().collect();
    clients.extend(read_named(|map| map.values().cloned().collect::<Vec<_>>()));
    for client in clients {
        client.settle().await;
    }
}

/// The client named `name` (`None`: the default client).
pub(crate) fn get(name: Option<&str>) -> Result<Client, Error> {
    match name {
        None => DEFAULT.get().cloned().ok_or(Error::NotInitialized),
        Some(name) => {
            read_named(|map| map.get(name).cloned()).ok_or_else(|| Error::UnknownClient {
                name: name.to_owned(),
            })
        }
    }
}

fn read_named<T>(f: impl FnOnce(&HashMap<String, Client>) -> T) -> T {
    let guard = sync::read(&NAMED);
    match guard.as_ref() {
        Some(map) => f(map),
        None => f(&HashMap::new()),
    }
}
