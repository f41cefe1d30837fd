#!/usr/bin/env bash
# Installs PostgreSQL (Debian's postgresql package) with apt-get when initdb is missing, for
# testkit::PostgresServer. Debian puts the server's programs in /usr/lib/postgresql/<version>/bin,
# off PATH, so both places are looked in. The package's own cluster and system service are not
# used: tests start their own throwaway servers (initdb into a temporary directory, a free
# loopback port), as the package's `postgres` user when run as root.
set -euo pipefail
find_initdb() {
  if command -v initdb >/dev/null 2>&1; then
    command -v initdb
    return
  fi
  # The highest version's.
  local found
  for found in /usr/lib/postgresql/*/bin/initdb; do
    if [ -x "$found" ]; then echo "$found"; fi
  done | sort -V | tail -n 1
}
if [ -z "$(find_initdb)" ]; then
  echo "PostgreSQL (initdb) not found: installing Debian's postgresql package with apt-get" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
initdb=$(find_initdb)
if [ -z "$initdb" ]; then
  echo "initdb still not found after installing postgresql" >&2
  exit 1
fi
# The server next to initdb (a symlink on PATH leads to its version's bin/).
"$(dirname "$(readlink -f "$initdb")")/postgres" --version >&2
