//! Client configuration: where Redis is, how keys are named, and the timing defaults.
//!
//! [`Config`] and its options (`options`), the deployment it reaches (`deployment`), its
//! checks (`validate`), what it shows of itself (`shown`, with `redact`), the sources it is
//! read from (`source`), the durations they give (`duration`) and what is wrong with a URL
//! (`url_problem`).

mod deployment;
pub(crate) mod duration;
mod options;
mod redact;
mod shown;
pub(crate) mod source;
mod url_problem;
mod validate;

pub(crate) use deployment::AddressMap;
pub(crate) use options::MAX_REPLICAS;
pub use options::{Config, ALL_REPLICAS};
pub(crate) use redact::redact_url;
#[cfg(feature = "tls")]
pub(crate) use redact::uses_tls;
pub(crate) use url_problem::url_problem;
pub(crate) use validate::ALL_NEEDS_SENTINEL;
