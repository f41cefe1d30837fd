#!/usr/bin/env bash
# Installs what checks the Grafana dashboard (ops/grafana/distlock-dashboard.json) against
# Grafana's published dashboard schema, when it is missing: no Grafana server is to be had from
# the package registries this project uses (Debian's archive has no grafana; PyPI and npm ship
# no Grafana binary), so tests/operator_kit type-checks the dashboard's JSON against the types
# Grafana generates from its schema instead:
#
#   @grafana/schema 13.2.3  the dashboard, panel and time series schema (npm, with the
#                           TypeScript compiler 5.9.3 that checks against it: `npm ci` from
#                           ops/grafana/schema-check/package-lock.json, pinned with integrity)
#   @grafana/prometheus 13.2.1  its Prometheus query type (`dist/types/dataquery.d.ts` only,
#                           from the npm tarball, whose integrity is checked here: the package
#                           itself pulls in Grafana's whole UI)
#
# into target/grafana-schema (or $DISTLOCK_GRAFANA_SCHEMA_DIR), with Debian's `npm` (installed
# with apt-get when missing). Prints that folder.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${DISTLOCK_GRAFANA_SCHEMA_DIR:-$PWD/target/grafana-schema}"
prometheus_version="13.2.1"
prometheus_integrity="sha512-No9we4Z1XGixg9k7Y0emsku+m5sJZZmHfiYLDDzffkMoO/EiUxSIc8GymT9awLMvoJcltzf8N5pPmoQn+Ufetg=="
stamp="$dir/.installed"
want="$(cat ops/grafana/schema-check/package-lock.json) prometheus@$prometheus_version"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$dir"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: installing Debian's npm with apt-get" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
echo "installing @grafana/schema and typescript (pinned) and @grafana/prometheus's query type into $dir" >&2
rm -rf "$dir"
mkdir -p "$dir/prometheus"
cp ops/grafana/schema-check/package.json ops/grafana/schema-check/package-lock.json "$dir/"
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
packed=$(cd "$dir" && npm pack "@grafana/prometheus@$prometheus_version" --json --loglevel=error)
integrity=$(grep -o '"integrity": *"[^"]*"' <<<"$packed" | head -n 1 | cut -d'"' -f4)
if [ "$integrity" != "$prometheus_integrity" ]; then
  echo "@grafana/prometheus@$prometheus_version: integrity $integrity, expected $prometheus_integrity" >&2
  exit 1
fi
tarball="$dir/grafana-prometheus-$prometheus_version.tgz"
tar xzf "$tarball" -C "$dir/prometheus" --strip-components=3 package/dist/types/dataquery.d.ts
rm -f "$tarball"
echo "$want" >"$stamp"
echo "$dir"
