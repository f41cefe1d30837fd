#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, unit, integration (real redis-server), UI,
# reliability and doc tests. Ends with one summary line: "suite: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
bash scripts/ensure-postgres.sh
cargo fmt --all -- --check
# `metrics`: the metrics test (distlock-suite) and example (distlock-examples) need it
# (benchmarks are built without it).
features="distlock-suite/metrics,distlock-examples/metrics"
cargo clippy --workspace --all-targets --features "$features" --locked -- -D warnings
# The runtime without its optional features (the suite turns `metrics` on): the metric hooks
# must compile to nothing, warning-free.
cargo clippy -p distlock-core -p distlock --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
# The published crates build from their packages exactly as users get them: a file left out of
# a package (a module, a license text, the README a crate names) fails here.
# Cargo verifies them through a local registry whose crates it unpacks into its own cache, and
# builds them as registry crates, which it never rebuilds for a change of content (a registry
# version is immutable): drop both, so the check builds the packages just made, not an earlier
# run's of the same version. The check has a target folder of its own.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
for stale in "$cargo_home"/registry/src/-*/distlock*-[0-9]* "$cargo_home"/registry/cache/-*/distlock*-[0-9]*; do
  if [ -e "$stale" ]; then rm -rf "$stale"; fi
done
package_target="${CARGO_TARGET_DIR:-target}/package-check"
rm -rf "$package_target"/debug/.fingerprint/distlock* "$package_target"/debug/deps/*distlock* "$package_target"/package
cargo package --locked --allow-dirty --quiet --target-dir "$package_target" -p distlock-core -p distlock-macros -p distlock -p distlock-cli
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --lib --bins --tests --examples --features "$features" --locked 2>&1 | tee "$log"
# The same features as the tests above, so the doc tests reuse their build (another feature
# set rebuilds the runtime and everything that unifies features with it, sqlx included).
cargo test --workspace --doc --features "$features" --locked 2>&1 | tee -a "$log"
passed=$(grep -Eo '(ok|FAILED)\. [0-9]+ passed|^[0-9]+ passed' "$log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
echo "suite: ${passed} passed, ${failed} failed"
