//! A client's identity record (`CLIENT_RECORD`): not a lock's, the process a client belongs to
//! (see `client::identity`).

/// Write a client's identity record and its expiry together (one script: the record never
/// outlives its expiry, and no `MULTI`, which a least-privilege user need not be granted).
///
/// KEYS: the record's key. ARGV: its expiry in ms, then its fields and values. Returns 1.
pub const CLIENT_RECORD: &str = r#"
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"#;
