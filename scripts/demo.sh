#!/usr/bin/env bash
# The demo: several OS processes take the same lock through #[distributed_lock] on a real,
# throwaway redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
# The operator's CLI, which the demo runs at its end (`distlock list`).
cargo build --locked -p distlock-cli
export DEMO_DISTLOCK_CLI="${CARGO_TARGET_DIR:-$PWD/target}/debug/distlock"
cargo run --locked -p distlock-examples --example demo
echo
echo "The same code against a 3-master Redis Cluster it starts itself: scripts/demo-cluster.sh"
