#!/usr/bin/env bash
# Installs redis-server with apt-get when it is missing (tests and the demo start their own
# throwaway servers on free loopback ports; no system service is used).
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found: installing it with apt-get" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version >&2
