"""Two pipeline stages training in step until stage 1 stops arriving (stuck outside its loop):
stage 0's next send of activations spins on GPU 0 for ever — 100 % busy to NVML, a few SMs,
no link traffic — while its host waits in the step's loss.item(). GPU 0 is hung, and the hang
names the point-to-point transfer (a send), not an all-reduce. Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import communication_pipeline_imbalance
import torch_loop

GPUS = 2
EXPECT = {0: "hung"}
SKIP = torch_loop.probes_unavailable
EXPECT_DETAIL = {0: ["recv (NCCL point-to-point", "RAS counts no point-to-point"]}
# The hang begins at 5 s; the verdict needs hang_after (10 s) and min_duration beyond it.
MIN_SECONDS = 40
# Balanced stages, stage 1 healthy until it stops arriving.
SPEC = {**communication_pipeline_imbalance.SPEC, "rank_specs": {"1": {"stop_after": 5.0}}}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
