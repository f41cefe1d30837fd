#!/usr/bin/env bash
# Installs Debian's prometheus package (it provides /usr/bin/prometheus and /usr/bin/promtool)
# with apt-get when either is missing, for the operator's kit (ops/): `promtool` checks and
# unit-tests the rule files, and tests/operator_kit.rs runs a throwaway `prometheus` of its own
# (a temporary folder, a free loopback port) against the metrics example. The package's own
# system service is not used and not started here (a service the package starts is not ours).
set -euo pipefail
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  echo "prometheus or promtool not found: installing Debian's prometheus package with apt-get" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
for tool in prometheus promtool; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool still not found after installing prometheus" >&2
    exit 1
  fi
done
promtool --version 2>&1 | head -n 1 >&2
