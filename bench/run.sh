#!/usr/bin/env bash
# The benchmark, one command: builds the release workspace, installs wrk and Debian's
# node_exporter if missing, then prints the scrape table (wrk, 1 and 64 connections, next to
# node_exporter) and the sampling-cost table (1 s ticks with 2,000 extra processes).
# Not part of the test command: it measures, it does not pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v prometheus-node-exporter >/dev/null || command -v node_exporter >/dev/null || missing+=(prometheus-node-exporter)
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The Debian package starts a node_exporter service on :9100; the benchmark starts its own.
  $sudo systemctl disable --now prometheus-node-exporter 2>/dev/null || true
fi
cargo build --release --workspace --quiet
echo "== $(date -u +%F) on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
echo "== scrapes under wrk"
python3 bench/wrk_compare.py target/release/gpu-bottleneck-exporter "$@"
echo "== sampling cost per 1 s tick"
python3 bench/sampling_cost.py target/release/gpu-bottleneck-exporter
