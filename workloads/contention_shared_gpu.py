"""Two experiments started from one shell (notebook kernels of one Jupyter server): siblings of
one parent, each a loop doing real work on GPU 0, time-sharing it. Their parentage makes them
look like one job; the GPU is shared all the same."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "contention"}


def experiment(args):
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu, share=0.2)
    loader = common.Loader(common.Images(files), batch_size=16, workers=1)
    common.train(gpu, loader, args.seconds, step_seconds=0.05, item_every=1, host_seconds=0.01)


def main(argv=None):
    args = common.arguments(__doc__, argv)
    common.dataset(args.data, "small", 2000, 96, 96)
    common.in_processes(experiment, args, 2)


if __name__ == "__main__":
    main()
