"""Two pipeline stages (GPipe's schedule over NCCL: each microbatch's activations sent forward
and its gradients sent back with batch_isend_irecv, ncclSend/ncclRecv), the layers split
unevenly: stage 1 holds twice the compute of stage 0. Stage 0's GPU spins in the receive
kernels waiting for stage 1's gradients — busy to NVML, a few SMs — while its host waits in the
step's loss.item(): its truth is communication, the pipeline's imbalance.

A known limit, kept as one: to every counter it is kernel_efficiency_pipeline_stages (stages of
equal time, stage 0's kernels leaving two thirds of the SMs empty). Both stages are as busy;
stage 0's SMs sit emptier; its host waits for its GPU the same way. A data-parallel rank's
peers run its kernels, so there its extra empty SMs are a spin; a stage's peers do not. The
verdict is kernel_efficiency with the cost right (the empty SMs), and its advice names both
readings: a stage waiting for a slower one needs its layers rebalanced, which only timing
inside the job (CUDA events, the profiler) confirms. Stage 1 waits only in the pipeline's fill
and drain (left to its truth). Written as PyTorch code (workloads/torch_loop.py) on the
emulated torch."""
import torch_loop

GPUS = 2
EXPECT = {0: "kernel_efficiency"}
EXPECT_DETAIL = {0: "waits for a slower one"}
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
