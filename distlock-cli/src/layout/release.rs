//! A forced release: the compare-and-delete of the lock an operator saw, and the notification
//! that wakes its waiters (on a Redis Cluster on the lock's own shard, as the runtime's release
//! does).

use distlock::redis::{self, RedisError};

use super::Layout;
use crate::cluster::Connection;

/// The outcome of a forced release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Deleted; the release channel's message reached this many subscribed clients.
    Deleted { woken_clients: u64 },
    /// The lock no longer had the owner that was shown: nothing changed.
    ChangedHands,
}

/// Deletes the lock if it still has the owner the operator saw (marked by its waiters or not,
/// `d2:<owner>+`), and wakes its waiters as the runtime's own release does when someone waits
/// (one `PUBLISH` on the release channel; on a cluster `SPUBLISH`, which reaches the
/// subscribers of the lock's shard). A semaphore's holders (several owners) are removed from
/// its sorted set, those still there; the key goes with the last of them.
///
/// KEYS: lock. ARGV: `s` (a sharded release channel) or `-`, the release channel (not a key:
/// a script of one key runs on a cluster also while its slot is half moved, where one of
/// several keys gets `TRYAGAIN`), then the owners. Returns `{removed, woken}` (`{0, 0}`: none
/// of them holds it any more).
const FORCE_RELEASE: &str = r#"
local publish = ARGV[1] == 's' and 'SPUBLISH' or 'PUBLISH'
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' or not (redis.call('ZSCORE', KEYS[1], 'd2:permits') or redis.call('ZSCORE', KEYS[1], 'd2:readers')) then
    return {0, 0}
  end
  local removed = redis.call('ZREM', KEYS[1], unpack(ARGV, 3))
  if removed == 0 then
    return {0, 0}
  end
  if redis.call('ZCARD', KEYS[1]) <= 1 then
    redis.call('DEL', KEYS[1])
  end
  return {removed, redis.call(publish, ARGV[2], '1')}
end
if v ~= ARGV[3] and v ~= ARGV[3] .. '+' then
  return {0, 0}
end
redis.call('DEL', KEYS[1])
return {1, redis.call(publish, ARGV[2], '1')}
"#;

impl Layout {
    /// Deletes the lock `name` if `owners` (its one owner; a semaphore's holders) still hold
    /// it, and wakes its waiters; on a cluster, on the master of the lock's slot.
    pub(crate) async fn force_release(
        &self,
        conn: &mut Connection,
        name: &str,
        owners: &[&str],
    ) -> Result<Released, RedisError> {
        let sharded = if conn.is_cluster() { "s" } else { "-" };
        let (deleted, woken): (i64, u64) = redis::Script::new(FORCE_RELEASE)
            .key(self.lock_key(name))
            .arg(sharded)
            .arg(self.channel(name))
            .arg(owners)
            .invoke_async(conn)
            .await?;
        Ok(if deleted > 0 {
            Released::Deleted {
                woken_clients: woken,
            }
        } else {
            Released::ChangedHands
        })
    }
}
