#!/usr/bin/env bash
# Builds the Dockerfile with podman where no container registry is reachable, then runs the
# image the way the DaemonSet does and scrapes it. Not part of the test command (a release
# build inside the container takes minutes): run it after changing the Dockerfile.
#
# The Dockerfile is used as it is. Only its two bases are made here, from Debian's own
# packages (debootstrap): `debian:bookworm-slim` (minbase, documentation trimmed as the
# official slim image does) and `rust:1.95-bookworm` (minbase with gcc and the C library
# headers; the pinned toolchain, rustc --print sysroot, and the crates.io cache are mounted
# into the build rather than copied). crun fails on this machine's cgroup hierarchy: runc; and
# podman's default rlimits (nofile and nproc past a million) are above what this sandbox lets
# runc set, so the runs ask for 4,096 of each.
#
# Then: uid 0, every capability dropped, read-only root filesystem, host /proc and /sys at
# /host/proc and /host/sys, the workspace's fake NVML mounted as libnvidia-ml.so.1 where the
# NVIDIA container runtime puts it: `serve --demo` answers, and with the fake NVML the
# scenario's GPUs appear on /metrics. Prints the image size.
set -euo pipefail
cd "$(dirname "$0")/.."
podman="podman --runtime runc"
work=${WORK:-/var/tmp/gbe-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
image=gpu-bottleneck-exporter:0.1.0
mkdir -p "$work"

base() { # name, debootstrap --include list (may be empty)
  local name=$1 include=$2 root="$work/$(echo "$1" | tr ':/' '__')"
  $podman image exists "localhost/$name" && return
  [ -x "$root/bin/sh" ] || debootstrap --variant=minbase ${include:+--include=$include} bookworm "$root" "$mirror"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
  tar -C "$root" -c . | $podman import \
    --change 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' - "$name" >/dev/null
}
base debian:bookworm-slim ""
base rust:1.95-bookworm gcc,libc6-dev,ca-certificates

toolchain=$(rustc --print sysroot)
registry=${CARGO_HOME:-$HOME/.cargo}/registry
mkdir -p "$registry"
# REUSE_IMAGE=1: check the image already built instead of building it again.
if [ -z "${REUSE_IMAGE:-}" ] || ! $podman image exists "$image"; then
  $podman build --pull=never -v "$toolchain:/usr/local/rust:ro" -v "$registry:/usr/local/cargo/registry" \
    -t "$image" .
fi
size=$($podman image inspect --format '{{.Size}}' "$image")

# The fake NVML, built for the host (same glibc as bookworm), with a two-GPU scenario.
cargo build --quiet --package fake-nvml
scenario=$(mktemp -d)
cat >"$scenario/scenario.yaml" <<'YAML'
devices:
  - uuid: GPU-1mage000-0000-0000-0000-000000000000
  - uuid: GPU-1mage000-0000-0000-0000-000000000001
YAML
run() { # port, args...: runs the image as the DaemonSet does, returns the container id
  local port=$1
  shift
  $podman run -d --rm --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --user 0:0 --cap-drop all --read-only --security-opt no-new-privileges \
    --pid host -v /proc:/host/proc:ro -v /sys:/host/sys:ro \
    -v "$PWD/target/debug/libfake_nvml.so:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:ro" \
    -v "$scenario:/scenario:ro" -e FAKE_NVML_SCENARIO=/scenario/scenario.yaml \
    -p "127.0.0.1:$port:9842" "$image" "$@"
}
scrape() { # port: /metrics once it answers
  for _ in $(seq 1 60); do
    curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null && return
    sleep 0.5
  done
  echo "the image did not answer on :$1" >&2
  return 1
}
demo=$(run 19842 serve --demo)
node=$(run 19843 serve --path.procfs=/host/proc --path.sysfs=/host/sys)
trap '$podman rm -f "$demo" "$node" >/dev/null 2>&1 || true; rm -rf "$scenario"' EXIT
demo_page=$(scrape 19842)
node_page=$(scrape 19843)
grep -q 'gpu_exporter_build_info{.*mode="demo"' <<<"$demo_page"
demo_gpus=$(grep -c '^gpu_up{' <<<"$demo_page")
node_gpus=$(grep -c '^gpu_up{.*GPU-1mage000' <<<"$node_page")
[ "$node_gpus" = 2 ] || { echo "the fake NVML's GPUs did not appear: $node_gpus" >&2; exit 1; }
caps=$($podman exec "$node" sh -c 'grep CapEff /proc/self/status')
printf 'image %s: %s MB; serve --demo: %s GPUs on /metrics; with the fake NVML: %s GPUs; %s\n' \
  "$image" "$(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1e6 }')" "$demo_gpus" "$node_gpus" "$caps"
