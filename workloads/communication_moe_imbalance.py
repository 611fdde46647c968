"""Four expert-parallel ranks (a mixture-of-experts model's experts spread over four GPUs, the
tokens exchanged with dist.all_to_all_single: one NCCL group of a send and a receive to and from
every rank, twice a layer in forward and twice in backward), rank 1 holding the hot experts: its
kernels take twice the others'. Every all-to-all waits for all four ranks, so the GPUs of ranks
0, 2 and 3 spin in it (busy to NVML, few SMs) while rank 1 computes, their hosts waiting in the
step's loss.item(): communication, the imbalance of their experts' load. A near miss for the
pipeline rule: these are NCCL sends and receives too, but to every rank of the group, not to the
stages beside one, so there is no pipeline schedule and no bubble to infer. The ranks wait in
blocking mode (four spinning hosts would fill this two-core test machine). Written as PyTorch
code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 4
EXPECT = {0: "communication", 1: "busy", 2: "communication", 3: "communication"}
# No rank reads as a pipeline stage.
EXPECT_ABSENT = {gpu: "pipeline stage" for gpu in range(GPUS)}
# The waiting ranks' hosts wait in loss.item(): only the CUDA probes tie the wait to the
# all-to-alls.
SKIP = torch_loop.probes_unavailable
SPEC = {
    "ranks": 4,
    "moe": True,
    "moe_layers": 1,
    "blocking": True,
    "sync": "item",
    "workers": 1,
    "step_seconds": 0.05,
    "rank_specs": {"1": {"step_seconds": 0.1}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
