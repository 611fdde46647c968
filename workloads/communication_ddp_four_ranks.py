"""Four DDP ranks (DistributedDataParallel over NCCL on four GPUs), rank 2 starved by its
decode-bound loader: the three others' GPUs spin in the all-reduce kernels for rank 2's
gradients while their hosts wait in the step's loss.item(). Ranks 0, 1 and 3 are
communication, rank 2 its own cause. The ranks wait for their GPU in blocking mode
(cudaDeviceScheduleBlockingSync): four spinning hosts would fill this two-core test machine,
where a real node has cores to spare for each rank. Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_straggler
import torch_loop

GPUS = 4
EXPECT = {0: "communication", 1: "communication", 2: "data_cpu", 3: "communication"}
# The waiting ranks' hosts wait in loss.item(): only the CUDA probes tie the wait to the
# collectives.
SKIP = torch_loop.probes_unavailable
# The two-rank DDP straggler's loop on four ranks, one worker each, rank 2 the late one.
SPEC = {
    **communication_ddp_straggler.SPEC,
    "ranks": 4,
    "blocking": True,
    "workers": 1,
    "rank_specs": {"2": communication_ddp_straggler.SPEC["rank_specs"]["1"]},
}


if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
