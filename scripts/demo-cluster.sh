#!/usr/bin/env bash
# The demo against a Redis Cluster: the same annotated code (examples/demo.rs) as
# scripts/demo.sh, its workers configured by `Config::from_env()` with DISTLOCK_CLUSTER_NODES
# set to the cluster's nodes. The demo starts a
# 3-master cluster itself (redis-server --cluster-enabled yes x3 on free loopback ports, then
# redis-cli --cluster create; Debian's redis-server package brings redis-cli) and stops those
# processes by PID when it ends (Ctrl-C reaches them too: they run in the demo's process group).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo run --locked -p distlock-examples --example demo -- --cluster
