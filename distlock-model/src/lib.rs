//! A checked model of distlock's Redis protocol (`d2`), after AWS ShardStore's way of trusting
//! a protocol bigger than anyone audits: an executable reference model small enough to read,
//! model-checked for its invariants, each invariant shown to bite by a seeded bug, and the real
//! implementation held to the model by a randomized conformance test.
//!
//! * [`keyspace`]: the part of a Redis server the scripts see (keys, expiry on an explicit
//!   clock, the commands the scripts call).
//! * [`scripts`]: every Lua script of `distlock-core/src/wire/scripts/`, as Rust over that
//!   keyspace, line for line; `tests/conformance.rs` runs the real scripts on a real
//!   `redis-server` (its clock frozen and stepped by the test) next to these and compares
//!   every reply, key and message.
//! * [`protocol`]: clients and faults around that server, a `stateright` model whose
//!   properties are the promise (`docs/protocol.md` names each, with the mutation that breaks
//!   it and the reliability test that tests it under real faults).

pub mod keyspace;
pub mod protocol;
pub mod scripts;
