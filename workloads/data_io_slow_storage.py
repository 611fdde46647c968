"""A dataset on slow storage: small files read with direct I/O in 4 KiB reads (no page cache
helps), four workers, each waiting on the disk far longer than it decodes."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "data_io"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "io", 4000, 320, 240, quality=97)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    images = common.Images(files, out=64, direct=True)
    loader = common.Loader(images, batch_size=64, workers=4)
    common.train(gpu, loader, args.seconds, step_seconds=0.03)


if __name__ == "__main__":
    main()
