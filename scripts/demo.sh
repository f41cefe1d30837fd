#!/usr/bin/env bash
# The demo: several OS processes take the same lock through #[distributed_lock] on a real,
# throwaway redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo run --release --locked --example demo
