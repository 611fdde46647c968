"""A GPU whose own PCIe link trained at generation 2, four lanes, in a gen 5 x16 slot (a riser or
slot gone bad; NVML reports the link as it trained): each step's batch (64 images of 448 x 448,
38 MB, `batch.to("cuda")` from pageable memory) crawls across the link for ~24 ms (1.6 GB/s)
where a healthy one takes 4 ms, the GPU idle and the host waiting in the copy. The link is the
cause (communication), not the sync: the copies' bytes at the link's speed say how long the
link cost. Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 1
DEVICE = "degraded_link"
EXPECT = {0: "communication"}
EXPECT_DETAIL = {0: "PCIe link"}
# The bytes copied come from the CUDA probes.
SKIP = torch_loop.probes_unavailable
SPEC = {"sync": "item", "upload": "pageable", "batch": 64, "image_side": 448, "workers": 2}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
