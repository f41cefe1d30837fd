#!/usr/bin/env bash
# The whole test suite: formatting, lints, docs, unit, integration (real redis-server), UI,
# reliability and doc tests. Ends with one summary line: "suite: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
bash scripts/ensure-postgres.sh
bash scripts/ensure-prometheus.sh
# Valkey 8.1 and Redis 8.2 for the server matrix (VALKEY_SERVER, REDIS8_SERVER).
servers=$(bash scripts/ensure-servers.sh)
eval "$(sed 's/^/export /' <<<"$servers")"
cargo fmt --all -- --check
# `metrics`: the metrics test (distlock-suite) and example (distlock-examples) need it
# (benchmarks are built without it).
features="distlock-suite/metrics,distlock-examples/metrics"
cargo clippy --workspace --all-targets --features "$features" --locked -- -D warnings
# The docs, warning-free (in the foreground: rustdoc in a target folder of its own, alongside
# the tests, once failed writing its pages).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
# Every test target is built first. Then the tests run (they mostly wait: on Redis, timers,
# failovers, child processes) while, in the background at the lowest CPU and I/O priority,
# the compile-bound checks use the idle cores: the runtime's lints without its optional
# features, the packages' build and the UI cases. Each has a target folder of its
# own (cargo holds a target folder's lock for a whole command), so none waits for the tests;
# at their priority they take CPU the tests leave unused.
common=(--workspace --exclude distlock-ui --lib --bins --examples --features "$features" --locked)
build_json=$(mktemp)
log=$(mktemp)
background_log=$(mktemp)
second_log=$(mktemp)
valkey_log=$(mktemp)
redis8_log=$(mktemp)
trap 'rm -f "$build_json" "$log" "$background_log" "$second_log" "$valkey_log" "$redis8_log"' EXIT
cargo test "${common[@]}" --tests --no-run --message-format=json-render-diagnostics >"$build_json"
# Two streams of tests run at once, both mostly waiting (on Redis, timers, failovers, child
# processes): cargo runs test binaries one after another, so the second stream is binaries
# started directly, as cargo would (cargo holds the target folder's lock for a whole
# command): the reliability suite (~7 minutes) and then the two slowest failover binaries
# (~3 minutes together), which balances it with everything else (~8 minutes less those).
# The other stream, through cargo, names every other test target.
second_stream=(reliability sentinel_failover clock_steps)
# The suite's test binary named $1 (another package may have a test target of that name:
# the CLI's `acl`).
executable() {
  grep '"package_id":"[^"]*#distlock-suite@' "$build_json" |
    grep "\"kind\":\\[\"test\"\\][^}]*\"name\":\"$1\"" | grep -o '"executable":"[^"]*"' | cut -d'"' -f4
}
second_executables=()
for name in "${second_stream[@]}"; do
  exe=$(executable "$name")
  if [ -z "$exe" ]; then
    echo "could not find the test binary $name in cargo's build output" >&2
    exit 1
  fi
  second_executables+=("$exe")
done
mapfile -t other_tests < <(grep -o '"target":{[^}]*}' "$build_json" | grep '"kind":\["test"\]' | grep -o '"name":"[^"]*"' | cut -d'"' -f4 | sort -u | grep -vxF "${second_stream[@]/#/-e}")
if [ "${#other_tests[@]}" -eq 0 ]; then
  echo "could not find the test binaries in cargo's build output" >&2
  exit 1
fi
other_targets=("${common[@]}")
for name in "${other_tests[@]}"; do
  other_targets+=(--test "$name")
done
low_priority=(nice -n 19)
if command -v ionice >/dev/null 2>&1; then
  low_priority+=(ionice -c 3)
fi
(
  set -euo pipefail
  target="${CARGO_TARGET_DIR:-$PWD/target}"
  # The runtime without its optional features (the suite turns `metrics` on): the metric
  # hooks must compile to nothing, warning-free.
  "${low_priority[@]}" cargo clippy -p distlock-core -p distlock --locked --target-dir "$target/background" -- -D warnings
  echo "lints without features: clean"
  # The published crates build from their packages exactly as users get them: a file left
  # out of a package (a module, a license text, the README a crate names) fails here.
  # Cargo verifies them through a local registry whose crates it unpacks into its own cache,
  # and builds them as registry crates, which it never rebuilds for a change of content (a
  # registry version is immutable): drop both, so the check builds the packages just made,
  # not an earlier run's of the same version.
  cargo_home="${CARGO_HOME:-$HOME/.cargo}"
  for stale in "$cargo_home"/registry/src/-*/distlock*-[0-9]* "$cargo_home"/registry/cache/-*/distlock*-[0-9]*; do
    if [ -e "$stale" ]; then rm -rf "$stale"; fi
  done
  package_target="$target/package-check"
  rm -rf "$package_target"/debug/.fingerprint/distlock* "$package_target"/debug/deps/*distlock* "$package_target"/package
  "${low_priority[@]}" cargo package --locked --allow-dirty --quiet --target-dir "$package_target" -p distlock-core -p distlock-macros -p distlock -p distlock-cli
  echo "packages: built from their packages"
  # The concurrency checks of the waiting core and of a lease (shuttle, `--cfg shuttle`, a
  # target folder of its own: ~2.5 min to build from cold, ~1.5 min to run).
  "${low_priority[@]}" bash scripts/shuttle.sh
  # The macro's compile-time errors and passing shapes (trybuild; `tests/ui`).
  # (trybuild builds the cases under the target folder it is given, absolute).
  CARGO_TARGET_DIR="$target/ui-check" "${low_priority[@]}" cargo test -p distlock-ui --test ui --locked
) >"$background_log" 2>&1 &
background=$!
(
  # Each binary of the stream runs even if one before it failed.
  stream_status=0
  for exe in "${second_executables[@]}"; do
    echo "     Running $exe"
    "$exe" || stream_status=1
  done
  exit "$stream_status"
) >"$second_log" 2>&1 &
second_run=$!
# The server matrix: the test binaries and reliability rows whose outcome depends on the
# server's behaviour (scripts, expiry, pub/sub, ACLs, replication and failover, cluster) run
# again on Valkey 8.1 and on Redis 8.2 (the test support starts the binary in REDIS_SERVER),
# one stream per server alongside the others (~5 minutes each; they mostly wait too). Debian's
# Redis 7.0 runs everything above.
matrix_tests=(core_lock core_renewal core_faults handoff crashed_waiters fault_kit_cluster permits read_holds multi_locks leader leader_terms leader_observe fence_redis fence_redis_watermark fence_redis_checks scripts_load replicas sentinel cluster redlock acl loss_reasons)
matrix_rows=(1a 5 6 16 c1 23 24)
reliability_exe=$(executable reliability)
# Runs the matrix on the server binary $1 (every binary, even after a failure).
run_matrix() {
  local stream_status=0 name exe
  for name in "${matrix_tests[@]}"; do
    exe=$(executable "$name")
    if [ -z "$exe" ] || [ "$(wc -l <<<"$exe")" -ne 1 ]; then
      echo "could not find the one test binary $name in cargo's build output: ${exe:-none}"
      return 1
    fi
    echo "     Running $name on $1"
    REDIS_SERVER="$1" "$exe" || stream_status=1
  done
  echo "     Running reliability ${matrix_rows[*]} on $1"
  REDIS_SERVER="$1" "$reliability_exe" "${matrix_rows[@]}" || stream_status=1
  return "$stream_status"
}
run_matrix "$VALKEY_SERVER" >"$valkey_log" 2>&1 &
valkey_run=$!
run_matrix "$REDIS8_SERVER" >"$redis8_log" 2>&1 &
redis8_run=$!
status=0
cargo test "${other_targets[@]}" --no-fail-fast 2>&1 | tee "$log" || status=1
# The same features as the tests above, so the doc tests reuse their build (another feature
# set rebuilds the runtime and everything that unifies features with it, sqlx included).
cargo test --workspace --doc --features "$features" --locked --no-fail-fast 2>&1 | tee -a "$log" || status=1
# Waits for a stream run alongside (pid $1), prints its output ($2) under a heading ($3) and
# adds it to the log; a failure fails the suite.
report_stream() {
  local stream_status=0
  wait "$1" || stream_status=$?
  echo "--- $3 (run alongside the other tests) ---"
  cat "$2"
  cat "$2" >>"$log"
  if [ "$stream_status" -ne 0 ]; then
    echo "$3: failed (exit $stream_status)"
    status=1
  fi
}
report_stream "$second_run" "$second_log" "the reliability suite, sentinel_failover and clock_steps"
report_stream "$valkey_run" "$valkey_log" "the server matrix on Valkey 8.1"
report_stream "$redis8_run" "$redis8_log" "the server matrix on Redis 8.2"
report_stream "$background" "$background_log" "lints without features, packages, concurrency checks and UI cases"
passed=$(grep -Eo '(ok|FAILED)\. [0-9]+ passed|^[0-9]+ passed' "$log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
echo "suite: ${passed} passed, ${failed} failed"
exit "$status"
