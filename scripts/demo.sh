#!/usr/bin/env bash
# The demo: several OS processes take the same lock through #[distributed_lock] on a real,
# throwaway redis-server, then a holder paused past its lease is refused by a fenced store
# (examples/demo.rs). Its first line names the server it talks to as the server names itself
# (`INFO server`: Redis or Valkey, and its version). Another server: REDIS_URL=redis://… (one
# that runs), or REDIS_SERVER=/path/to/valkey-server (the binary the demo starts;
# scripts/ensure-servers.sh prints where the suite's Valkey 8.1 and Redis 8.2 are).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
# The operator's CLI, which the demo runs at its end (`distlock list`).
cargo build --locked -p distlock-cli
export DEMO_DISTLOCK_CLI="${CARGO_TARGET_DIR:-$PWD/target}/debug/distlock"
cargo run --locked -p distlock-examples --example demo
echo
echo "The same code against a 3-master Redis Cluster it starts itself: scripts/demo-cluster.sh"
