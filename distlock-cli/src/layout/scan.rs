//! Finding the held locks: `SCAN` (never `KEYS`) of the one server, or of every master of a
//! Redis Cluster in turn (each holds the locks of its slots), and what a listing covered.

use std::collections::BTreeSet;

use distlock::redis::{self, RedisError};

use super::{Entry, Layout, Lock, NotALock};
use crate::cluster::{Connection, Node};

/// The held locks a listing found, and which masters it read.
#[derive(Debug)]
pub(crate) struct Found {
    /// The held locks, sorted by name (a semaphore's holders one each).
    pub(crate) locks: Vec<Lock>,
    /// The keys under the prefix that are not locks (each read by the CLI itself), sorted.
    pub(crate) not_locks: Vec<NotALock>,
    /// A cluster's masters: those read, and those that could not be (their locks are
    /// missing); both empty on one server.
    pub(crate) masters: Vec<Node>,
    pub(crate) unread: Vec<(Node, RedisError)>,
}

impl Layout {
    /// The names of the lock keys matching the glob `names` on `node` (a cluster's master;
    /// `None`: the one server), and the keys that matched but cannot be a lock's (their names
    /// contain braces).
    async fn scan(
        &self,
        conn: &mut Connection,
        node: Option<&Node>,
        names: &str,
        found: &mut BTreeSet<String>,
        odd: &mut BTreeSet<String>,
    ) -> Result<(), RedisError> {
        let pattern = self.key_pattern(names);
        let mut cursor = 0u64;
        loop {
            let scan = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .clone();
            let (next, keys): (u64, Vec<Vec<u8>>) = conn.on_node(node, &scan).await?;
            for key in keys {
                let key = String::from_utf8_lossy(&key).into_owned();
                match self.name_of_key(&key) {
                    Some(name) => found.insert(name),
                    None => odd.insert(key),
                };
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// The held locks whose names match the glob `names`, and the keys among them that are not
    /// locks, each sorted: on a cluster, from every master (a master that cannot be read is
    /// named in [`Found::unread`], and the rest still shown).
    pub(crate) async fn read_matching(
        &self,
        conn: &mut Connection,
        names: &str,
    ) -> Result<Found, RedisError> {
        let masters = conn.masters().await?;
        let mut found = BTreeSet::new();
        let mut odd = BTreeSet::new();
        let mut unread = Vec::new();
        if masters.is_empty() {
            self.scan(conn, None, names, &mut found, &mut odd).await?;
        }
        for master in &masters {
            if let Err(error) = self
                .scan(conn, Some(master), names, &mut found, &mut odd)
                .await
            {
                unread.push((master.clone(), error));
            }
        }
        let mut not_locks: Vec<NotALock> = odd
            .into_iter()
            .map(|key| NotALock {
                key,
                holds: "a key whose name cannot be a lock name (it has braces inside)".to_owned(),
            })
            .collect();
        let names: Vec<String> = found.into_iter().collect();
        let mut locks = Vec::new();
        for (_, entry) in self.read(conn, &names).await? {
            match entry {
                Entry::Lock(lock) => locks.push(*lock),
                Entry::Semaphore(holders) => locks.extend(holders),
                Entry::NotALock(odd) => not_locks.push(odd),
                Entry::Free => {}
            }
        }
        not_locks.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Found {
            locks,
            not_locks,
            masters,
            unread,
        })
    }
}
