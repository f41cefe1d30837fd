#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, unit, integration (real redis-server), UI,
# reliability and doc tests. Ends with one summary line: "suite: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo fmt --all -- --check
# `distlock-suite/metrics`: the metrics test and example need it (benchmarks are built without it).
cargo clippy --workspace --all-targets --features distlock-suite/metrics --locked -- -D warnings
# The runtime without its optional features (the suite turns `metrics` on): the metric hooks
# must compile to nothing, warning-free.
cargo clippy -p distlock-core -p distlock --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --lib --bins --tests --examples --features distlock-suite/metrics --locked 2>&1 | tee "$log"
cargo test --workspace --doc --locked 2>&1 | tee -a "$log"
passed=$(grep -Eo '(ok|FAILED)\. [0-9]+ passed|^[0-9]+ passed' "$log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
echo "suite: ${passed} passed, ${failed} failed"
