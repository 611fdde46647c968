"""Heavy decode with too few workers: large JPEGs decoded, blurred and cropped by a single
loader worker that runs flat out while the GPU waits."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "data_cpu"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "large", 200, 1024, 768)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    loader = common.Loader(common.Images(files, blur=2), batch_size=8, workers=1)
    common.train(gpu, loader, args.seconds, step_seconds=0.04)


if __name__ == "__main__":
    main()
