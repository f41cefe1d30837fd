//! Redis key layout of one lock: lock key, fencing floor, release channel and (RedLock) the
//! waiters' queue, all in one slot.
//!
//! For a lock named `order:42` under the prefix `distlock` the keys are
//! `distlock:{order:42}` (the lock), `distlock:{order:42}:fence` (the fencing floor),
//! `distlock:{order:42}:released` (the release channel) and `distlock:{order:42}:queue` and
//! `distlock:{order:42}:queue:until` (the waiters' tickets and how long each entry lasts, see
//! `scripts::ACQUIRE_QUEUED`: over a RedLock quorum, and a plain lock's waiters elsewhere, to
//! whom a release hands the lock). A semaphore of the same name
//! (`distlock::semaphore`) lies at the lock key itself, as a sorted set of its holders, with the
//! same fence key and release channel, so a lock and a semaphore of one name meet and exclude
//! each other (see `scripts`, "Permits"); shared (read) holds lie there too, and a writer
//! waiting for them marks its intent at `distlock:{order:42}:writer` (see `scripts`, "Shared
//! holds"). Redis Cluster hashes only the text
//! between the first `{` and the next `}`; the prefix may not contain braces and the name may
//! not contain `}`, so that text is exactly the lock name for all of them: they always share
//! one hash slot, and nothing in the name can move one of them to another slot.

use std::io::Write;

use redis::{RedisWrite, ToRedisArgs};

use crate::error::Error;

/// Longest accepted lock name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// The Redis keys of one lock, in one buffer: `prefix:{name}:released`, whose prefix up to the
/// closing brace is the lock key and whose middle is the name (one allocation per acquire; the
/// fence key, needed only by fenced acquires, is made when asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// `prefix:{name}:released`.
    text: String,
    /// Where the name starts (after `prefix:{`).
    name_at: usize,
    /// Where the lock key ends (after the `}`).
    lock_end: usize,
}

/// The release channel's suffix.
const CHANNEL_SUFFIX: &str = ":released";

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self, Error> {
        validate_name(name)?;
        let mut text = String::with_capacity(prefix.len() + name.len() + 3 + CHANNEL_SUFFIX.len());
        text.push_str(prefix);
        text.push_str(":{");
        let name_at = text.len();
        text.push_str(name);
        text.push('}');
        let lock_end = text.len();
        text.push_str(CHANNEL_SUFFIX);
        Ok(LockKeys {
            text,
            name_at,
            lock_end,
        })
    }

    /// The lock's name, as the user gave it.
    pub(crate) fn name(&self) -> &str {
        &self.text[self.name_at..self.lock_end - 1]
    }

    /// The lock key, `prefix:{name}`.
    pub(crate) fn lock(&self) -> &str {
        &self.text[..self.lock_end]
    }

    /// The release channel, `prefix:{name}:released`.
    pub(crate) fn channel(&self) -> &str {
        &self.text
    }

    /// The fencing floor key, `prefix:{name}:fence`.
    pub(crate) fn fence(&self) -> String {
        self.with_suffix(":fence")
    }

    /// A leader election's record, `prefix:{name}:leader` (see `scripts`, `leader.rs`).
    pub(crate) fn leader(&self) -> String {
        self.with_suffix(":leader")
    }

    /// A leader election's last terms, `prefix:{name}:leader:terms`.
    pub(crate) fn leader_terms(&self) -> String {
        self.with_suffix(":leader:terms")
    }

    /// A leader election's candidates, `prefix:{name}:leader:candidates` (client id → identity).
    pub(crate) fn leader_candidates(&self) -> String {
        self.with_suffix(":leader:candidates")
    }

    /// A waiting writer's intent, `prefix:{name}:writer` (see `scripts`, "Shared holds").
    pub(crate) fn writer(&self) -> String {
        self.with_suffix(":writer")
    }

    /// The waiters' tickets, `prefix:{name}:queue` (a sorted set), as a command argument
    /// written in place (no allocation: releases send it).
    pub(crate) fn queue(&self) -> Suffixed<'_> {
        Suffixed(self.lock(), ":queue")
    }

    /// The request that last queued each waiter, `prefix:{name}:queue:ids` (a hash, value →
    /// request id): a release's grant names it, so that the waiter trusts the grant from that
    /// request's send and from no later one (one server, Sentinel, a cluster), as
    /// [`LockKeys::queue`].
    pub(crate) fn queue_ids(&self) -> Suffixed<'_> {
        Suffixed(self.lock(), ":queue:ids")
    }

    /// How long each waiter's entry lasts, `prefix:{name}:queue:until` (a sorted set), as
    /// [`LockKeys::queue`].
    pub(crate) fn queue_until(&self) -> Suffixed<'_> {
        Suffixed(self.lock(), ":queue:until")
    }

    fn with_suffix(&self, suffix: &str) -> String {
        let mut key = String::with_capacity(self.lock_end + suffix.len());
        key.push_str(self.lock());
        key.push_str(suffix);
        key
    }
}

/// A key made of the lock key and a suffix, written into a command as one argument.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Suffixed<'a>(&'a str, &'static str);

impl ToRedisArgs for Suffixed<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        // Writing into the command's own buffer cannot fail.
        let _ = arg.write_all(self.0.as_bytes());
        let _ = arg.write_all(self.1.as_bytes());
    }
}

impl std::fmt::Display for Suffixed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.0, self.1)
    }
}

fn validate_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "a lock name cannot be empty"
    } else if name.len() > MAX_NAME_LEN {
        "a lock name is limited to 1024 bytes; hash long values before putting them in a key"
    } else if name.contains('}') || name.contains('{') {
        "a lock name cannot contain `{` or `}` (they would change the Redis Cluster hash slot); the `#[distributed_lock]` key templates escape them for you"
    } else {
        return Ok(());
    };
    Err(Error::InvalidKey {
        key: shorten(name),
        reason,
    })
}

/// Validates a key prefix (no braces, not empty).
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.is_empty() || prefix.contains('{') || prefix.contains('}') || prefix.len() > 128 {
        return Err(Error::InvalidConfig {
            reason: format!(
                "key prefix `{}` must be 1 to 128 bytes without `{{` or `}}`",
                shorten(prefix)
            ),
        });
    }
    Ok(())
}

/// The first 64 characters of a long name, for error messages.
pub(crate) fn shorten(name: &str) -> String {
    const SHOWN: usize = 64;
    match name.char_indices().nth(SHOWN) {
        None => name.to_owned(),
        Some((cut, _)) => format!("{}… ({} bytes)", &name[..cut], name.len()),
    }
}

/// The Redis Cluster hash slot of a key (CRC16/XMODEM of the hash tag, modulo 16384).
pub fn hash_slot(key: &[u8]) -> u16 {
    let tagged = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16_xmodem(tagged) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_shares_one_tag() {
        let k = LockKeys::new("distlock", "order:42").unwrap();
        assert_eq!(k.name(), "order:42");
        assert_eq!(k.lock(), "distlock:{order:42}");
        assert_eq!(k.fence(), "distlock:{order:42}:fence");
        assert_eq!(k.channel(), "distlock:{order:42}:released");
        assert_eq!(k.queue().to_string(), "distlock:{order:42}:queue");
        assert_eq!(
            k.queue_until().to_string(),
            "distlock:{order:42}:queue:until"
        );
        assert_eq!(k.queue_ids().to_string(), "distlock:{order:42}:queue:ids");
        let slot = hash_slot(k.lock().as_bytes());
        assert_eq!(slot, hash_slot(b"order:42"));
        assert_eq!(slot, hash_slot(k.queue_ids().to_string().as_bytes()));
        assert_eq!(slot, hash_slot(k.fence().as_bytes()));
        assert_eq!(slot, hash_slot(k.channel().as_bytes()));
        assert_eq!(slot, hash_slot(k.queue().to_string().as_bytes()));
        assert_eq!(slot, hash_slot(k.queue_until().to_string().as_bytes()));
    }

    #[test]
    fn crc16_matches_redis_reference() {
        // Values from the Redis Cluster specification.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
    }

    #[test]
    fn rejects_bad_names() {
        for bad in ["", "a{b", "a}b"] {
            assert!(matches!(
                LockKeys::new("p", bad),
                Err(Error::InvalidKey { .. })
            ));
        }
        let long = "x".repeat(MAX_NAME_LEN + 1);
        let err = LockKeys::new("p", &long).unwrap_err();
        assert!(err.to_string().contains("1025 bytes"), "{err}");
        assert!(LockKeys::new("p", &"x".repeat(MAX_NAME_LEN)).is_ok());
    }
}
