//! Compile-time behaviour of `#[distributed_lock]`: every supported function shape expands and
//! runs (`tests/ui/pass`), and every misuse gives exactly one error at the right token
//! (`tests/ui/fail`, pinned by the `.stderr` files), the crate docs' `compile_fail` examples
//! among them (`tests/ui/docs`).
//!
//! Regenerate the `.stderr` files after an intended message change with
//! `TRYBUILD=overwrite cargo test --test ui`, then read every changed file.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
    // The crate docs' `compile_fail` examples, kept equal to them by tests/doc_examples.rs.
    cases.compile_fail("tests/ui/docs/*.rs");
}
