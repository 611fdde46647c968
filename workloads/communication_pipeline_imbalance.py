"""Two pipeline stages (GPipe's schedule over NCCL: each microbatch's activations sent forward
and its gradients sent back with batch_isend_irecv, ncclSend/ncclRecv), the layers split
unevenly: stage 1 holds twice the compute of stage 0. Stage 0's GPU spins in the receive
kernels waiting for stage 1's gradients — busy to NVML, a few SMs — while its host waits in the
step's loss.item(): communication, the pipeline's imbalance, not its own work. Stage 1 waits
only in the pipeline's fill and drain (about a tenth of its time, at the floor of a named cause:
left to its truth). Written as PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 2
EXPECT = {0: "communication"}
# The host waits in loss.item(): only the CUDA probes (its driver waits while it issues
# sends and receives) tie the wait to the transfers.
SKIP = torch_loop.probes_unavailable
SPEC = {
    "ranks": 2,
    "pipeline": True,
    "sync": "item",
    "loader": "light",
    "workers": 2,
    "step_seconds": 0.06,
    "rank_specs": {"1": {"step_seconds": 0.12}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
