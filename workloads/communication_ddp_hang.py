"""Two DDP ranks training in step until rank 1 stops arriving (stuck outside its loop, as a rank
whose loader deadlocks or whose node is lost): rank 0's next all-reduce kernels spin on GPU 0
for ever — 100 % busy to NVML, a few SMs, no link traffic — while its host waits in the step's
loss.item() (not in a collective frame: NCCL enqueued and returned). GPU 0 is hung, not busy.
At the run's end the process group's watchdog aborts it. Hung once the host has waited in the
CUDA driver for hang_after since it issued the all-reduce (the probes on libnccl and libcuda).
Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = {0: "hung"}
# The host waits in loss.item(), not in a collective frame: only the CUDA probes (the thread
# inside the driver since it issued the all-reduce) tell the hang.
SKIP = torch_loop.probes_unavailable
# The collective, and NCCL's RAS service (asked inside the job's network namespace) naming the
# rank that never reached it: rank 1 answers RAS (its process lives) with fewer all-reduces.
EXPECT_DETAIL = {0: ["all_reduce", "rank 1 (pid", "launched AllReduce up to"]}
# The hang begins at 5 s; the verdict needs hang_after (10 s) and min_duration beyond it.
MIN_SECONDS = 40
# The DDP straggler's loop, rank 1 healthy until it stops arriving.
SPEC = {**communication_ddp_straggler.SPEC, "rank_specs": {"1": {"stop_after": 5.0}}}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
