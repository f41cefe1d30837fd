#!/usr/bin/env bash
# The protocol's checked model (distlock-model, docs/protocol.md), deeper than CI: every
# configuration exhaustively to a longer horizon (the one-server model, tests/model_check.rs,
# and RedLock's over three masters, tests/redlock.rs), longer random walks, every seeded mutation,
# and the real scripts held to the model on a real redis-server for 200,000 operations (CI runs
# 40,000). Exits non-zero on any property violated, mutation missed, disagreement between
# the scripts and their model, or script changed without its model (its SHA1 no longer the
# one recorded in distlock-model/src/scripts/digests.txt, or a new script not modelled).
#
#   DISTLOCK_MODEL_OPS=n     conformance operations (default 200000)
#   DISTLOCK_MODEL_SEED=s    replay one conformance run (the seed a disagreement printed)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
export DISTLOCK_MODEL_DEEP=1
export DISTLOCK_MODEL_OPS="${DISTLOCK_MODEL_OPS:-200000}"
# Optimized (the checks run millions of states), one test binary at a time, each test's
# report printed (state counts, depth, operations).
cargo test -p distlock-model --release --locked -- --nocapture
