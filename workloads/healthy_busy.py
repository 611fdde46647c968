"""A healthy loop: two workers keep the batches ahead of a GPU-bound step."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "busy"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    loader = common.Loader(common.Images(files), batch_size=32, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.06)


if __name__ == "__main__":
    main()
