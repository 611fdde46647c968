"""The near miss of the DDP straggler: two balanced DDP ranks of small kernels (30 % of the SMs
busy), each host waiting in loss.item() for its own GPU while the process issues all-reduces.
Both GPUs busy with their SMs mostly empty, both hosts in the driver after collectives: the
waits are their own kernels', not a peer's (neither GPU is busier than the other), so the
verdict is kernel_efficiency on both, not communication. Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = {0: "kernel_efficiency", 1: "kernel_efficiency"}
SKIP = torch_loop.probes_unavailable
# The DDP straggler's loop with both ranks alike, and kernels that keep 30 % of the SMs busy.
SPEC = {**communication_ddp_straggler.SPEC, "sm": 0.3, "rank_specs": {}}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
