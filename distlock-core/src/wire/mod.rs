//! The wire: what distlock sends to Redis and how a lock is laid out there — ids (`ids`), the
//! keys of one lock in one hash slot (`keys`), and the protocol `d2`, one typed call per
//! request (`scripts`: the Lua sources; `request`: how one goes out and comes back; `calls`:
//! the typed calls, one file per family, as the scripts).

pub(crate) mod calls;
pub(crate) mod ids;
pub(crate) mod keys;
pub(crate) mod request;
pub mod scripts;
