//! Benchmark harness (placeholder; being written).
fn main() {}
