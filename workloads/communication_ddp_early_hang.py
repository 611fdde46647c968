"""communication_ddp_hang at the job's start: the communicator created in init_process_group
(its device_id given) and rank 1 stopping before its first step. Rank 0's first all-reduces
spin on GPU 0 for ever, issued within a second of its first allocation: before the exporter can
have attached its probes to NCCL, which therefore never see a collective; its host waits in the
step's loss.item(), inside the CUDA driver, the GPU busy with its SMs nearly empty. GPU 0 is
hung (it read kernel_efficiency before: a wait after no seen collective was no hang). Written as
PyTorch code (workloads/torch_loop.py) on the emulated torch."""
import communication_ddp_hang
import communication_ddp_straggler
import torch_loop

GPUS = 2
EXPECT = {0: "hung"}
SKIP = torch_loop.probes_unavailable
MIN_SECONDS = communication_ddp_hang.MIN_SECONDS
SPEC = {
    **communication_ddp_straggler.SPEC,
    "eager_init": True,
    "rank_specs": {"1": {"stop_after": 1e-6}},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
