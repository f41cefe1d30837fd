//! A lock's fence floor read or raised on its own (`FENCE_FLOOR`): the rounds that make a
//! fencing token over a RedLock quorum (`deploy::redlock::token`), for every kind of hold.

use std::time::Duration;

use crate::lease::millis_ceil;
use crate::wire::keys::LockKeys;
use crate::wire::request::{Call, Request, FENCE_FLOOR_SCRIPT};

/// [`FENCE_FLOOR`]: read a lock's fence floor, or raise it to at least `raise_to`.
pub(crate) struct FenceFloorCall<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) id: &'a [u8],
    /// The token to raise the floor to (0: read only).
    pub(crate) raise_to: u64,
    /// How long the fence floor is kept.
    pub(crate) retention: Duration,
}

impl Call for FenceFloorCall<'_> {
    type Raw = i64;
    /// The floor before the raise (the floor, when only read).
    type Reply = u64;

    fn request(&self) -> Request {
        let mut cmd = FENCE_FLOOR_SCRIPT.evalsha();
        cmd.arg(1)
            .arg(self.keys.fence())
            .arg(self.id)
            .arg(self.raise_to)
            .arg(millis_ceil(self.retention));
        Request::Script(&FENCE_FLOOR_SCRIPT, cmd)
    }

    fn request_id(&self) -> &[u8] {
        self.id
    }

    fn decode(&self, floor: i64) -> Option<u64> {
        u64::try_from(floor).ok()
    }
}
