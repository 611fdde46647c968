"""A job that holds a GPU (its context and weights) and does nothing with it."""
import time

import common
import emugpu

GPUS = 1
EXPECT = {0: "idle"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    time.sleep(args.seconds)


if __name__ == "__main__":
    main()
