#!/usr/bin/env bash
# The concurrency checks of the client's waiting core and of a lease, under shuttle
# (distlock-core's `checks` modules: `client/waiting/checks/`, `lease/checks.rs`). They need
# `--cfg shuttle` (shuttle's mutexes, atomics and a clock only the checks move, in place of
# std's and tokio's: `distlock-core/src/sync.rs`), as tokio's loom checks need `--cfg loom`;
# the flag changes every crate's build, so they build in a target folder of their own.
# Each check runs thousands of interleavings picked by PCT and at random, and each seeded bug
# must be caught; a failure prints the schedule (or seed) that replays it. The interleavings
# are the same each run (a fixed seed); a soak looks further:
#   DISTLOCK_SHUTTLE_FRESH=1 DISTLOCK_SHUTTLE_SCALE=10 scripts/shuttle.sh
# (fresh seeds, ten times the schedules; a failure prints its seed and the command replaying it).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}/shuttle"
RUSTFLAGS="${RUSTFLAGS:-} --cfg shuttle" CARGO_TARGET_DIR="$target" \
  cargo test -p distlock-core --lib --locked -- shuttle_ "$@"
