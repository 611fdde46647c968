"""loss.item() every step with blocking sync: the host sleeps until the GPU drains, then the
GPU waits while the host does its per-step Python work (metrics, logging)."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "sync_stall"}


def main(argv=None, sync="blocking"):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real, sync=sync)
    common.model(gpu)
    loader = common.Loader(common.Images(files), batch_size=16, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.05, item_every=1, host_seconds=0.03)


if __name__ == "__main__":
    main()
