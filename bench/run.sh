#!/usr/bin/env bash
# The benchmark, one command: builds the release workspace, installs what it compares with if
# missing (wrk and node_exporter from Debian, nvitop-exporter from PyPI, all-smi from crates.io
# with the protoc, protobuf and libdrm headers it builds with), then prints the scrape table
# (wrk, 1 and 64 connections, next to node_exporter) and the sampling-cost table (1 s ticks,
# 2,000 extra processes, training-shaped ranks and idle ones, next to all-smi, nvitop-exporter
# and node_exporter). Not part of the test command: it measures, it does not pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v prometheus-node-exporter >/dev/null || command -v node_exporter >/dev/null || missing+=(prometheus-node-exporter)
command -v protoc >/dev/null || missing+=(protobuf-compiler)
[ -e /usr/include/google/protobuf/timestamp.proto ] || missing+=(libprotobuf-dev)
[ -e /usr/include/libdrm/amdgpu.h ] || missing+=(libdrm-dev)
if ((${#missing[@]})); then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The Debian package starts a node_exporter service on :9100; the benchmark starts its own.
  $sudo systemctl disable --now prometheus-node-exporter 2>/dev/null || true
fi
command -v nvitop-exporter >/dev/null || python3 -m pip install -q nvitop-exporter
# all-smi's current release needs a newer rustc than this toolchain; 0.22.0 builds with it.
PEERS=${PEERS:-$PWD/target/peers}
[ -x "$PEERS/bin/all-smi" ] || command -v all-smi >/dev/null ||
  cargo install --locked all-smi --version 0.22.0 --root "$PEERS"
export PATH="$PEERS/bin:$PATH"
cargo build --release --workspace --quiet
echo "== $(date -u +%F) on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
echo "== scrapes under wrk"
python3 bench/wrk_compare.py target/release/gpu-bottleneck-exporter "$@"
echo "== sampling cost per 1 s tick, next to the peers"
python3 bench/sampling_cost.py target/release/gpu-bottleneck-exporter
