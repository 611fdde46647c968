"""Device memory held at 97 %: a model and cached activations sized to the last gigabyte."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "memory_pressure"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    gpu.alloc(int(0.97 * gpu.memory_total) - gpu.memory_used())
    loader = common.Loader(common.Images(files), batch_size=32, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.06)


if __name__ == "__main__":
    main()
