//! A lock taken from its holder now: expired on the server ([`TestRedis::expire_lock`]) or
//! taken by another owner ([`TestRedis::steal_lock`]), and every client of the server made to
//! confirm its leases at once, so the holder is told within a round trip.

use std::fmt;
use std::time::Duration;

use crate::client::Client;
use crate::deploy::check_faults;
use crate::error::Error;
use crate::fence::Fence;
use crate::lock::guard::LockGuard;
use crate::testing::server::{lock_key, TestRedis};

/// How long the new holder of a stolen lock leases it (renewed while it holds it).
const NEW_HOLDER_TTL: Duration = Duration::from_secs(30);

impl TestRedis {
    /// The locks of clients configured with another [`Config::key_prefix`]: the same faults,
    /// under `prefix` (the methods of [`TestRedis`] use the default prefix, `distlock`).
    ///
    /// [`Config::key_prefix`]: crate::Config::key_prefix
    pub fn key_prefix(&self, prefix: impl Into<String>) -> Locks<'_> {
        Locks {
            server: self,
            prefix: prefix.into(),
        }
    }

    /// Takes the lock `name` from its holder now, as if its lease had run out on the server:
    /// its key is deleted, as an expiry, an eviction, a restart without persistence or
    /// `distlock release --force` would, and every client of this server confirms its leases
    /// at once (a test-only nudge of their server check; see the [module docs](crate::testing)).
    /// The holder is told [`LossReason::Expired`] within a round trip: `run` and the attribute
    /// cancel the body and return [`Error::Lost`], [`LockGuard::lost`] resolves. Nobody holds
    /// the lock afterwards, and nothing is published: its waiters find it free at their next
    /// try, as after an expiry.
    ///
    /// For every kind of hold of the name (a lock, a semaphore's permits, read holds: all of
    /// them). A client with [`Config::server_check`] off hears at its next renewal instead,
    /// and without `renew` not at all (then a fenced write is what refuses it: see
    /// [`TestRedis::steal_lock`]).
    ///
    /// [`LossReason::Expired`]: crate::LossReason::Expired
    /// [`Config::server_check`]: crate::Config::server_check
    ///
    /// # Panics
    ///
    /// If nobody holds the lock (the test came before the code under test took it: wait for
    /// a signal from its body), or the server cannot be asked.
    pub async fn expire_lock(&self, name: &str) {
        self.key_prefix("distlock").expire_lock(name).await;
    }

    /// Takes the lock `name` from its holder now and gives it to another owner, as a failover
    /// to a replica where someone else took it would: the key is deleted and a client of the
    /// kit's own takes the lock, fenced (its token above every token the name had), renewed
    /// until the returned [`NewHolder`] is released or dropped. Every client of this server
    /// confirms its leases at once, as with [`TestRedis::expire_lock`]: the holder is told
    /// [`LossReason::Stolen`] within a round trip (or [`LossReason::Expired`], should one of
    /// its renewals fall in the round trip between the delete and the new holder's take).
    ///
    /// A fenced write of the old holder's is refused once the new holder has claimed the store
    /// or written to it ([`NewHolder::fence`]; [`FencedStore::claim`]): [`Error::Fenced`],
    /// whether or not the old holder was told.
    ///
    /// [`LossReason::Stolen`]: crate::LossReason::Stolen
    /// [`LossReason::Expired`]: crate::LossReason::Expired
    /// [`FencedStore::claim`]: crate::fence::redis::FencedStore::claim
    ///
    /// # Panics
    ///
    /// If nobody holds the lock, the name is not a lock's (a semaphore or readers: use
    /// [`TestRedis::expire_lock`]), or the server cannot be asked.
    pub async fn steal_lock(&self, name: &str) -> NewHolder {
        self.key_prefix("distlock").steal_lock(name).await
    }

    /// Every client that checks this server confirms its leases now.
    pub(crate) async fn confirm_leases(&self) {
        check_faults::confirm_leases(&self.run_id().await);
    }
}

/// The locks under one key prefix of a [`TestRedis`] ([`TestRedis::key_prefix`]).
#[derive(Debug)]
pub struct Locks<'a> {
    server: &'a TestRedis,
    prefix: String,
}

impl Locks<'_> {
    /// [`TestRedis::is_locked`] under this prefix.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::is_locked`].
    pub async fn is_locked(&self, name: &str) -> bool {
        self.server.is_locked_under(&self.prefix, name).await
    }

    /// [`TestRedis::expire_lock`] under this prefix.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::expire_lock`].
    pub async fn expire_lock(&self, name: &str) {
        self.delete(name, "expire_lock").await;
        self.server.confirm_leases().await;
    }

    /// [`TestRedis::steal_lock`] under this prefix.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::steal_lock`].
    pub async fn steal_lock(&self, name: &str) -> NewHolder {
        let what = || format!("distlock::testing: steal_lock({name:?})");
        let client = self
            .server
            .config()
            .key_prefix(self.prefix.clone())
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", what()));
        self.delete(name, "steal_lock").await;
        let guard = client
            .lock(name)
            .fenced(true)
            .ttl(NEW_HOLDER_TTL)
            .renew(true)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{}: the new holder could not take it: {e}", what()));
        self.server.confirm_leases().await;
        NewHolder {
            guard,
            _client: client,
        }
    }

    /// Deletes the lock's key; panics if there was none.
    async fn delete(&self, name: &str, fault: &str) {
        let key = lock_key(&self.prefix, name);
        let deleted: u64 = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut self.server.connection().await)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: {fault}({name:?}): DEL {key}: {e}"));
        assert!(
            deleted == 1,
            "distlock::testing: {fault}({name:?}): nobody holds the lock (no key {key} on {}); take it first, and wait for a signal from the body that holds it",
            self.server.url()
        );
    }
}

/// The owner that took a lock from its holder ([`TestRedis::steal_lock`]): it holds the lock,
/// fenced and renewed, until it is released or dropped.
pub struct NewHolder {
    guard: LockGuard,
    /// The kit's own client, kept while the lock is held.
    _client: Client,
}

impl fmt::Debug for NewHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewHolder")
            .field("name", &self.guard.name())
            .field("token", &self.token())
            .finish()
    }
}

impl NewHolder {
    /// Its fencing token: above every token the lock's name had before.
    pub fn token(&self) -> u64 {
        self.guard.token().unwrap_or_default()
    }

    /// Its fence, for a [`FencedStore`](crate::fence::redis::FencedStore)'s `claim` or
    /// `set` (or a store of your own): from then on the old holder's fenced writes are
    /// refused.
    pub fn fence(&self) -> Fence {
        Fence::new(self.guard.name(), self.token())
    }

    /// Lets the lock go.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<(), Error> {
        self.guard.release().await
    }
}
