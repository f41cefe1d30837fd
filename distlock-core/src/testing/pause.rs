//! The server paused: frozen by `SIGSTOP` (its connections stay open, nothing answers, its keys'
//! expiry dates keep running out by the wall clock), thawed by `SIGCONT`.

use std::time::Duration;

use crate::testing::server::TestRedis;

impl TestRedis {
    /// Freezes the server now (`SIGSTOP` to the `redis-server` process): connections stay
    /// open and nothing is answered, as a server stuck in a long command, a paused VM or a
    /// partition that drops nothing would; until the returned guard is dropped or
    /// [`Paused::resume`]d (`SIGCONT`), so a failing test never leaves a frozen server behind.
    ///
    /// A holder whose lease runs out meanwhile is told [`LossReason::Unreachable`] (its
    /// renewals went unanswered) and its body cancelled, or [`LossReason::LeaseElapsed`]
    /// without `renew`. The server's clock runs on: a key whose date passes during the pause is
    /// gone when the server thaws (the renewals that waited meanwhile find nothing to extend).
    /// Every client of the server waits: pause a private server ([`TestRedis::start`]), not
    /// the one [`init`](crate::testing::init) shares between the tests of the process.
    ///
    /// [`LossReason::Unreachable`]: crate::LossReason::Unreachable
    /// [`LossReason::LeaseElapsed`]: crate::LossReason::LeaseElapsed
    ///
    /// # Panics
    ///
    /// If `kill` cannot be run or fails.
    pub fn pause(&self) -> Paused<'_> {
        if let Err(e) = self.signal("-STOP") {
            panic!("{e}");
        }
        Paused {
            server: self,
            resumed: false,
        }
    }

    /// [`TestRedis::pause`] for `how_long`, then thaws the server.
    ///
    /// # Panics
    ///
    /// As [`TestRedis::pause`].
    pub async fn pause_for(&self, how_long: Duration) {
        let paused = self.pause();
        tokio::time::sleep(how_long).await;
        paused.resume();
    }
}

/// A server frozen by [`TestRedis::pause`]; thawed when dropped.
#[must_use = "the server thaws when the guard is dropped"]
#[derive(Debug)]
pub struct Paused<'a> {
    server: &'a TestRedis,
    resumed: bool,
}

impl Paused<'_> {
    /// Thaws the server now (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// If `kill` cannot be run or fails.
    pub fn resume(mut self) {
        if let Err(e) = self.thaw() {
            panic!("{e}");
        }
    }

    fn thaw(&mut self) -> std::io::Result<()> {
        match std::mem::replace(&mut self.resumed, true) {
            true => Ok(()),
            false => self.server.signal("-CONT"),
        }
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        // Never a panic here (the test may be unwinding already): the supervisor thaws the
        // server in any case when it stops it.
        let _ = self.thaw();
    }
}
