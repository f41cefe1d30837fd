//! Compile-time behaviour of `#[distributed_lock]`: every supported function shape expands and
//! runs (`pass/`), and every misuse gives exactly one error at the right token (`fail/`,
//! pinned by the `.stderr` files), the crate docs' `compile_fail` examples among them
//! (`docs/`, kept equal to them by the suite's tests/doc_examples.rs).
//!
//! Regenerate the `.stderr` files after an intended message change with
//! `TRYBUILD=overwrite cargo test -p distlock-ui --test ui`, then read every changed file.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("pass/*.rs");
    cases.compile_fail("fail/*.rs");
    // The crate docs' `compile_fail` examples.
    cases.compile_fail("docs/*.rs");
}
