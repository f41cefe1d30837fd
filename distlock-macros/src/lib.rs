//! The `#[distributed_lock]` attribute (stub; filled in by the macro work).
#![deny(missing_docs)]

use proc_macro::TokenStream;

/// Wraps an async function in a Redis distributed lock.
#[proc_macro_attribute]
pub fn distributed_lock(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
