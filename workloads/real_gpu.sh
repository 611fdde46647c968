#!/usr/bin/env bash
# The workload suite on a real NVIDIA GPU with CUDA PyTorch, as one bounded run: what a device
# session executes (about 8 minutes on one GPU; workloads needing more GPUs are skipped).
#   bash workloads/real_gpu.sh [path/to/gpu-bottleneck-exporter]
# Writes the table and the rows to $OUT (or /tmp). Reads only: no clock, power or mode changes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
exporter=${1:-target/release/gpu-bottleneck-exporter}
nvidia-smi -L
python3 -c "import torch, PIL; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
PYTHONUNBUFFERED=1 timeout 540 python3 workloads/run.py --real --exporter "$exporter" \
  --seconds 30 --window 15 --min-duration 5 --json "$out/real-suite.json" 2>&1 | tee "$out/real-suite.log"

# The CUDA probes on the real driver: one real loop with a NaN check every step (a sync no
# Python frame names) under an exporter with the real NVML, and the probes' series for it.
# Launches and waits above zero say the real libcuda's entry points are the ones probed.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'listen_address: 127.0.0.1:%s\nsample_interval: 1s\n' "$port" >"$out/probe-config.yaml"
"$exporter" --config "$out/probe-config.yaml" >"$out/probe-exporter.log" 2>&1 &
exporter_pid=$!
timeout 60 python3 workloads/torch_loop.py --real --spec '{"sync": "nan_check", "host_seconds": 0.025}' \
  --seconds 40 >"$out/probe-loop.log" 2>&1 &
loop_pid=$!
sleep 30
python3 - "$port" <<'PY' | tee "$out/probe-series.txt"
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
for line in text.splitlines():
    if line.startswith(("gpu_process_cuda", 'gpu_exporter_signal_supported{signal="cuda_probes"')):
        print(line)
for gpu in json.load(urllib.request.urlopen(base + "/api/v1/diagnosis", timeout=10))["gpus"]:
    print(f"GPU {gpu['gpu']}: {gpu['primary']} ({gpu['basis']}): {gpu['lost_time']['summary'] if gpu.get('lost_time') else ''}")
PY
wait "$loop_pid" || true
kill "$exporter_pid" || true
