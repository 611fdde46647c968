"""Thousands of tiny kernels per step: each keeps a tenth of the SMs busy, back to back, so the
GPU is "100 % utilized" while most of the chip sits idle."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "kernel_efficiency"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    loader = common.Loader(common.Images(files), batch_size=16, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.06, kernels=1200, sm=0.1, dram=0.1)


if __name__ == "__main__":
    main()
