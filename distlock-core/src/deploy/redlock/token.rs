//! The fencing token of a lock, a permit or a read hold taken over a RedLock quorum
//! (`Config::redlock`): [`Quorum::fence_token`].
//!
//! Each master keeps its own fence floor (the fenced acquire raises it), and the masters'
//! clocks differ, so the largest token of one majority is not by itself above an earlier
//! holder's token from another majority. Two more rounds make it so, once the acquire counted
//! (a majority for a lock or a read, a permit's quorum for a permit): read the floors of a
//! majority, take a token above all of them and above the acquire's own tokens, and raise the
//! floors of a majority to it before handing it out.
//!
//! * **Above every earlier token.** A later holder's read reaches a majority, so at least one
//!   master whose floor this holder raised. A lock's later holder reads it only after its own
//!   acquire saw this holder's lock gone (released after the raise, or expired, which the
//!   validity check puts after the raise), so its token is strictly larger; so is the token of
//!   any acquire (a permit's, a reader's) that started after this token was handed out.
//! * **Never the same token twice.** Holders of a semaphore, and readers, hold at once, so two
//!   of them can read the same floors and pick the same token. The raise counts only if every
//!   master of the majority that answered had a floor below the token (`FENCE_FLOOR` returns
//!   the floor before the raise): two raises to one token both counting would need a master
//!   in both majorities that was below it for each, but one of the two found it already
//!   raised. A raise that finds a floor at or above its token (another acquire's raise, or
//!   its grant: the acquire scripts raise a master's floor to its clock in µs) tries again
//!   [`AHEAD`] above that floor, so that the grants meanwhile count up from below its token
//!   instead of racing past it (up to [`RAISES`] times, within the lease's validity).

use std::time::Duration;

use tokio::time::Instant;

use crate::deploy::call_error::CallError;
use crate::deploy::redlock::count::majority;
use crate::deploy::redlock::Quorum;
use crate::wire::calls::FenceFloorCall;
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;

/// How far above the floor it found a raise that lost tries again, in token units (the
/// masters' clocks in µs): more than a round trip and the masters' clock differences, so the
/// fenced grants meanwhile (which take the larger of their clock and the floor + 1) stay
/// below it. Tokens only need to increase; each lost raise moves them this much further ahead
/// of the clocks. Measured: 45 fenced permits (3 permits over 5 masters, 9 tasks taking one
/// again as soon as they left) lost 18–30 raises in 0.3 s, one extra round trip each; a lock
/// (one holder at a time) loses one only to a contender's minority grant.
const AHEAD: u64 = 1_000_000;

/// Raises tried before the acquire gives up (`NoQuorum`, and the lock is released): each
/// lost only to another acquire that raised the floor to the same token or above meanwhile.
const RAISES: usize = 8;

/// A fenced take whose token the rounds raise above every earlier holder's.
pub(crate) struct Taken<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The acquire's own largest token (the masters that granted it hold it as their floor).
    pub(crate) token: u64,
    /// How long the raised floors are kept.
    pub(crate) retention: Duration,
    /// The end of the lease's validity: no token is handed out after it.
    pub(crate) valid_until: Instant,
}

impl Quorum {
    /// The token for a lock just taken by a majority (a permit: its quorum), `taken`. Each
    /// round is one call bounded by `timeout`, with a fresh request id from `new_id`. Fails
    /// with [`CallError::NoQuorum`] when a round does not reach a majority, when the lease's
    /// validity ran out meanwhile, or when every raise met another acquire's; the caller then
    /// releases the lock.
    pub(crate) async fn fence_token(
        &self,
        taken: Taken<'_>,
        timeout: Duration,
        new_id: impl Fn() -> ShortId,
    ) -> Result<u64, CallError> {
        let no_quorum = || CallError::NoQuorum {
            agreed: 0,
            required: majority(self.len()),
        };
        // A read (`raise_to` 0) or a raise: the largest floor, before the raise, of the
        // majority that answered.
        let floor = |raise_to: u64| {
            let id = new_id();
            let (keys, retention) = (taken.keys, taken.retention);
            async move {
                let call = FenceFloorCall {
                    keys,
                    id: id.as_bytes(),
                    raise_to,
                    retention,
                };
                self.call(&call, timeout).await.map(|(floor, _)| floor)
            }
        };
        // Above the acquire's own tokens too: the masters that granted it hold them as floors.
        let mut token = taken.token.max(floor(0).await?).saturating_add(1);
        for _ in 0..RAISES {
            let before = floor(token).await?;
            if Instant::now() >= taken.valid_until {
                return Err(no_quorum());
            }
            if before < token {
                return Ok(token);
            }
            token = before.saturating_add(AHEAD);
        }
        Err(no_quorum())
    }
}
