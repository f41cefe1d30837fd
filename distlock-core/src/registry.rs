//! The process-wide registry of clients: one default and any number of named ones.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use crate::client::Client;
use crate::error::Error;

static DEFAULT: OnceLock<Client> = OnceLock::new();
static NAMED: RwLock<Option<HashMap<String, Client>>> = RwLock::new(None);

/// Fails early (before connecting) if `name` is taken.
pub(crate) fn ensure_free(name: Option<&str>) -> Result<(), Error> {
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

pub(crate) fn insert(name: Option<String>, client: Client) -> Result<(), Error> {
    match name {
        None => DEFAULT
            .set(client)
            .map_err(|_| Error::AlreadyInitialized { client: None }),
        Some(name) => {
            let mut guard = NAMED.write().unwrap_or_else(|e| e.into_inner());
            let map = guard.get_or_insert_with(HashMap::new);
            if map.contains_key(&name) {
                return Err(Error::AlreadyInitialized { client: Some(name) });
            }
            map.insert(name, client);
            Ok(())
        }
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
    let guard = NAMED.read().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(map) => f(map),
        None => f(&HashMap::new()),
    }
}
