"""Two balanced DDP ranks standing for ranks on two nodes (one GPU each), their all-reduces
crossing each node's InfiniBand port (NCCL_IB_HCA): node-1's port trained at 10 Gb/s (4X SDR,
a cable or port gone bad) where node-0's runs at 200 Gb/s. A ring all-reduce moves at its
slowest link's pace, so both GPUs spin in NCCL's kernels for the wire, busy to NVML, a few
SMs, while their hosts wait in loss.item(): communication on both, and node-1's exporter names
its slow port. Run by workloads/two_nodes.py --slow-link, which builds each node's sysfs with
its port (`$EMUGPU_DIR/node-<n>/sys`) and an exporter per node. Written as PyTorch code
(workloads/torch_loop.py) on the emulated torch."""
import torch_loop

GPUS = 2
EXPECT = {0: "communication", 1: "communication"}
SKIP = torch_loop.probes_unavailable


def port(node):
    """A rank's environment on its node: its HCA, found in its node's sysfs."""
    return {"env": {"NCCL_IB_HCA": "mlx5_0", "FAKE_NCCL_SYSFS": f"$EMUGPU_DIR/node-{node}/sys"}}


SPEC = {
    "ranks": 2,
    "ddp": True,
    "sync": "item",
    "step_seconds": 0.06,
    # 50 MB of gradients: 40 ms a step across 10 Gb/s, 2 ms across 200.
    "gradient_bytes": 50 << 20,
    "rank_specs": {"0": port(0), "1": port(1)},
}

if __name__ == "__main__":
    torch_loop.main(spec=SPEC)
