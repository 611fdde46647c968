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
