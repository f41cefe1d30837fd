//! The wire: what distlock sends to Redis and how a lock is laid out there — ids (`ids`), the
//! keys of one lock in one hash slot (`keys`), and the protocol `d2`, one typed call per
//! request (`scripts`).

pub(crate) mod ids;
pub(crate) mod keys;
pub mod scripts;
