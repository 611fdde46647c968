"""Two DDP ranks training in step until rank 1's whole process freezes (SIGSTOP: its NCCL
threads too, as a lost node, a network partition or a stopped container leaves it to its
peers): rank 0's next all-reduce kernels spin on GPU 0 for ever while its host waits in the
step's loss.item(). Hung, and NCCL's RAS service (asked inside the job's network namespace)
names the rank that does not answer — where the sleeping rank of communication_ddp_hang
answers RAS with fewer all-reduces. Written as PyTorch code (workloads/torch_loop.py) on the
emulated torch."""
import communication_ddp_hang
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = {0: "hung"}
SKIP = torch_loop.probes_unavailable
EXPECT_DETAIL = {0: ["all_reduce", "rank 1 (pid", "does not answer"]}
MIN_SECONDS = communication_ddp_hang.MIN_SECONDS
SPEC = {
    **communication_ddp_straggler.SPEC,
    "rank_specs": {"1": {"stop_after": 5.0, "stop_how": "freeze"}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
