#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration (real redis-server), UI and doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
cargo test --workspace --lib --bins --tests --examples --locked
cargo test --workspace --doc --locked
