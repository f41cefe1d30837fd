#!/usr/bin/env bash
# Installs Debian's prometheus package (it provides /usr/bin/prometheus and /usr/bin/promtool)
# and prometheus-alertmanager (/usr/bin/amtool) with apt-get when a tool is missing, for the
# operator's kit (ops/): `promtool` checks and unit-tests the rule files and checks the scrape
# configuration, `amtool` checks the Alertmanager example and where it routes each alert, and
# tests/operator_kit (and the axum_metrics example's test) run a throwaway `prometheus` of their
# own (a temporary folder, a free loopback port). The packages' own system services are not
# used and not started here (a service a package starts is not ours).
set -euo pipefail
packages=()
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  packages+=(prometheus)
fi
if ! command -v amtool >/dev/null 2>&1; then
  packages+=(prometheus-alertmanager)
fi
if [ "${#packages[@]}" -gt 0 ]; then
  echo "${packages[*]} not found: installing Debian's package(s) with apt-get" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi
for tool in prometheus promtool amtool; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool still not found after installing ${packages[*]:-nothing}" >&2
    exit 1
  fi
done
promtool --version 2>&1 | head -n 1 >&2
amtool --version 2>&1 | head -n 1 >&2
