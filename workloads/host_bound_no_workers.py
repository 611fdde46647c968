"""num_workers=0: every image is decoded in the main training loop, which runs flat out while
the GPU waits between steps."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "host_bound"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "large", 200, 1024, 768)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    loader = common.Loader(common.Images(files), batch_size=8, workers=0)
    common.train(gpu, loader, args.seconds, step_seconds=0.02)


if __name__ == "__main__":
    main()
