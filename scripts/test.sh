#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this) and as the README names it.
# Installs what it needs when missing: promtool (Debian `prometheus`), iostat (`sysstat`),
# amtool (`prometheus-alertmanager`),
# the Python `prometheus_client` package whose OpenMetrics parser is strict, PyYAML, and
# kubernetes-validate (offline Kubernetes schemas), helm-python-sdk (real Helm, no binary),
# bcrypt (password hashes for the TLS/auth check), Pillow (the workloads' JPEG data sets),
# iproute2 and fuse3 with mfusepy (the workloads that read over a real link and a FUSE mount).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step is timed; the table at the end shows where the time went.
timings=()
step_name=""
step_started=$SECONDS
end_step() {
  if [ -n "$step_name" ]; then
    timings+=("$(printf '%5d s  %s' $((SECONDS - step_started)) "$step_name")")
  fi
  step_name=""
}
step() {
  end_step
  step_name="$*"
  step_started=$SECONDS
  printf '\n==> %s\n' "$*"
}

missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v iostat >/dev/null || missing+=(sysstat)
command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
# Network namespaces, veth and htb for the workload that streams its data over a real link;
# libfuse 3 for the one that reads through a FUSE mount.
command -v ip >/dev/null && command -v tc >/dev/null || missing+=(iproute2)
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v tmux >/dev/null || missing+=(tmux)  # `top` is tested as a person runs it
if ((${#missing[@]})); then
  step "installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for module in prometheus_client:prometheus_client yaml:pyyaml kubernetes_validate:kubernetes-validate helm_python:helm-python-sdk bcrypt:bcrypt PIL:Pillow mfusepy:mfusepy; do
  if ! python3 -c "import ${module%%:*}" 2>/dev/null; then
    step "installing ${module##*:} (Python)"
    python3 -m pip install -q "${module##*:}" 2>/dev/null ||
      python3 -m pip install -q --break-system-packages "${module##*:}"
  fi
done

step "cargo fmt --check"
cargo fmt --all -- --check

step "modules: no import cycle, the data flow one way, no file past its size"
python3 scripts/check_modules.py

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

# The longest step from a fresh clone (every dependency compiled once); the test step after it
# reuses this build.
step "cargo build (the exporter, and the fake NVML and stub CUDA libraries the tests load)"
cargo build --workspace

# Two checks that mostly wait on the clocks of a real Prometheus and Alertmanager (1 s scrapes
# and evaluations, 3 s `for:`, the demo's 40 s case rotation) run beside `cargo test`, which
# keeps the CPUs busy meanwhile; their output and time are reported after it.
beside=()
run_beside() {
  local name=$1 log
  shift
  log=$(mktemp)
  (
    started=$SECONDS
    rc=0
    "$@" >"$log" 2>&1 || rc=$?
    echo "$((SECONDS - started)) $rc" >"$log.done"
  ) &
  beside+=("$!|$log|$name")
}
run_beside "dashboards: in step with their generator; every query returns data from a real Prometheus scraping the demo node" \
  bash -c 'python3 scripts/build_dashboards.py --check && python3 scripts/check_dashboards.py target/debug/gpu-bottleneck-exporter'
run_beside "alert path: demo exporters -> Prometheus with the rules -> Alertmanager with the example config -> webhook" \
  python3 scripts/check_alert_path.py target/debug/gpu-bottleneck-exporter

# The test binaries mostly wait (live processes, real servers' timeouts): three run at once.
step "cargo test (the test binaries three at a time)"
python3 scripts/run_tests.py --jobs 3

end_step
failed=0
for job in "${beside[@]}"; do
  IFS='|' read -r pid log name <<<"$job"
  wait "$pid" || true
  read -r seconds rc <"$log.done"
  printf '\n==> %s (beside cargo test)\n' "$name"
  cat "$log"
  timings+=("$(printf '%5d s  %s (beside cargo test)' "$seconds" "$name")")
  rm -f "$log" "$log.done"
  [ "$rc" = 0 ] || { echo "FAILED: $name"; failed=1; }
done
[ "$failed" = 0 ] || exit 1

step "golden expositions: promtool check metrics and the strict OpenMetrics parser"
for file in tests/golden/*.prom; do
  promtool check metrics <"$file"
done
python3 scripts/check_exposition.py --openmetrics tests/golden/*.om.txt

step "Prometheus rules: promtool check and unit tests; every runbook link resolves"
promtool check rules deploy/rules/*.yml
promtool test rules tests/rules/*.test.yml
python3 scripts/check_runbooks.py deploy/rules/*.yml

step "Alertmanager example: amtool check-config; every alert routes by its severity"
python3 scripts/check_alertmanager.py

step "Kubernetes manifests: schemas, the PrometheusRule in step with deploy/rules"
kubernetes-validate --strict --quiet deploy/kubernetes/serviceaccount.yaml deploy/kubernetes/daemonset.yaml deploy/kubernetes/service.yaml deploy/kubernetes/dashboards-configmap.yaml
embedded=$(mktemp --suffix=.yml)
python3 scripts/build_manifests.py --check "$embedded"
promtool check rules "$embedded"
rm -f "$embedded"

step "systemd unit: systemd-analyze verify (against the built binary)"
unit_dir=$(mktemp -d)
sed "s#/usr/local/bin/gpu-bottleneck-exporter#$PWD/target/debug/gpu-bottleneck-exporter#" \
  deploy/systemd/gpu-bottleneck-exporter.service >"$unit_dir/gpu-bottleneck-exporter.service"
systemd-analyze verify "$unit_dir/gpu-bottleneck-exporter.service"
rm -rf "$unit_dir"

step "README and docs/: every relative link resolves, every config key is documented"
python3 scripts/check_docs.py

step "Helm chart: lint, render, schemas, toggles"
python3 scripts/check_helm.py target/debug/gpu-bottleneck-exporter

step "TLS, client certificates and basic auth through Python's OpenSSL client"
python3 scripts/check_tls.py target/debug/gpu-bottleneck-exporter

step "the real binary, on this host and on the demo node: /metrics through promtool and the OpenMetrics parser"
python3 scripts/check_exposition.py --live target/debug/gpu-bottleneck-exporter
python3 scripts/check_exposition.py --live target/debug/gpu-bottleneck-exporter --demo

# Slow (about 20 s per workload) because the loops really train, each until its verdict has
# held for 8 s, twice the latch's min_duration (25 s at most): the one end-to-end check that real Python
# processes, read through /proc, py-spy and the fake NVML, get the verdicts their bottleneck
# should.
step "workload suite, fast subset: Python training loops on the emulated GPU get their expected verdicts"
python3 workloads/run.py --fast --strict --exporter target/debug/gpu-bottleneck-exporter \
  --nvml-library target/debug/libfake_nvml.so

# One after the other: the two "nodes" share this host's CPUs, and each run's ranks and
# exporters load them; run at once on a slow CI machine, the straggler's loader waited for a
# CPU that the other run held (read as contention, as it was) and node-1 never read data_cpu.
step "one job on two nodes: GPUJobStraggler on the straggler's node only; with node-1's InfiniBand port at 10 Gb/s, both GPUs communication and node-1 names its port; no hang alert while rank 0 preprocesses on the other node"
python3 workloads/two_nodes.py --exporter target/debug/gpu-bottleneck-exporter \
  --nvml-library target/debug/libfake_nvml.so
python3 workloads/two_nodes.py --slow-link --exporter target/debug/gpu-bottleneck-exporter \
  --nvml-library target/debug/libfake_nvml.so
python3 workloads/two_nodes.py --startup-wait --exporter target/debug/gpu-bottleneck-exporter \
  --nvml-library target/debug/libfake_nvml.so

step "random training loops: the exporter's lost-time split against the ground truth the loops record"
# Slow (about 33 s a loop): the split is compared over a 20 s window after 10 s of warm-up, and
# a loop cannot end early (its expectation is the truth's, known only at its end). Two seeds:
# one loop of seed 2 (a decode loop under CPU hogs); one of seed 1 (two ranks with an
# all-reduce reading a remote store under CPU hogs on MIG slices). A remote store alone, a
# second job and kernel efficiency are in the fast subset (the test command has 15 minutes).
python3 workloads/run.py --random 3 --seed 2 --loops 1 --seconds 30 --min-agreement 0.5 --max-mae 0.1 \
  --exporter target/debug/gpu-bottleneck-exporter --nvml-library target/debug/libfake_nvml.so
python3 workloads/run.py --random 100 --seed 1 --loops 40 --seconds 30 --min-agreement 0.5 --max-mae 0.1 \
  --exporter target/debug/gpu-bottleneck-exporter --nvml-library target/debug/libfake_nvml.so

end_step
echo
printf '%s\n' "${timings[@]}"
printf '%5d s  in all\n' "$SECONDS"
echo "all checks passed"
