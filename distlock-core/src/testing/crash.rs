//! A client that dies as a killed process does ([`TestRedis::crashable`], [`Crashable::crash`]):
//! from the crash on, nothing it sends reaches the server, so none of its leaving paths (a
//! waiter leaving its queue, a release, a renewal) runs there, and what it left in Redis stays
//! as a `SIGKILL` leaves it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::Client;
use crate::config::Config;
use crate::error::Error;
use crate::testing::server::TestRedis;

/// Tells the kit's users apart within one server (and, with the pid, across test processes
/// sharing one).
static NEXT: AtomicU64 = AtomicU64::new(0);

impl TestRedis {
    /// A client of this server that the test can kill as a process is killed: its waiters'
    /// entries stay queued, its holds stay held until their lease runs out, and nothing it
    /// would send on the way out (a waiter leaving, a release) reaches the server. Take locks
    /// through [`Crashable::client`] (wait for them in tasks of their own), then call
    /// [`Crashable::crash`]: the test's other clients see what they see after an OOM kill or
    /// a deploy's `SIGKILL` of a busy replica, without a child process.
    ///
    /// The client connects as a Redis user of its own (`ACL SETUSER`, all permissions), with
    /// the defaults of [`Config::new`] otherwise; [`TestRedis::crashable_with`] takes a
    /// configuration of the test's.
    ///
    /// # Errors
    ///
    /// What [`Config::connect`] returns.
    ///
    /// # Panics
    ///
    /// If the server cannot be asked to make the user (it is a test helper).
    pub async fn crashable(&self) -> Result<Crashable, Error> {
        self.crashable_with(self.config()).await
    }

    /// [`TestRedis::crashable`] with the test's own configuration: `config`'s server and
    /// credentials are replaced by this server and the crashable user; every other setting
    /// (timeouts, key prefix, defaults) is kept.
    ///
    /// # Errors
    ///
    /// What [`Config::connect`] returns.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::crashable`].
    pub async fn crashable_with(&self, config: Config) -> Result<Crashable, Error> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let user = format!("distlock-crash-{}-{n}", std::process::id());
        let password = uuid::Uuid::new_v4().simple().to_string();
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&user)
            .arg("reset")
            .arg("on")
            .arg(format!(">{password}"))
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .query_async(&mut self.connection().await)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: ACL SETUSER {user}: {e}"));
        let url = format!("redis://{user}:{password}@127.0.0.1:{}/", self.port());
        let mut config = config;
        config.url = url;
        let client = config.connect().await?;
        Ok(Crashable {
            client,
            user,
            server: self.url().to_owned(),
        })
    }
}

/// A client of a [`TestRedis`] that the test kills as a process is killed
/// ([`TestRedis::crashable`]).
pub struct Crashable {
    client: Client,
    user: String,
    server: String,
}

impl fmt::Debug for Crashable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Crashable")
            .field("user", &self.user)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Crashable {
    /// The client, to take locks through (`crashable.client().lock(name)`, or `.clone()` into
    /// a task) until the crash.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Kills the client as `SIGKILL` kills its process: its user is switched off and its
    /// connections closed on the server, so from now on nothing it sends (a waiter leaving
    /// its queue, a release, a renewal, a reconnection) reaches Redis. What it held stays held
    /// until its lease runs out, its waiters stay queued (until their entries lapse: see
    /// `distlock`'s "Waiters that went away"), and the server publishes nothing for its
    /// connections' end. In the process, its calls fail from now on; drop its tasks.
    ///
    /// # Panics
    ///
    /// If the server cannot be asked (it is a test helper).
    pub async fn crash(&self) {
        let mut conn = redis::Client::open(self.server.as_str())
            .unwrap_or_else(|e| panic!("distlock::testing: {e}"))
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| {
                panic!("distlock::testing: cannot connect to {}: {e}", self.server)
            });
        // Off first: a reconnection after the kill is refused, not let in before it.
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&self.user)
            .arg("off")
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: ACL SETUSER {} off: {e}", self.user));
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(&self.user)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("distlock::testing: CLIENT KILL USER {}: {e}", self.user));
    }
}
