"""Too many workers for the host: eight decode workers on a node with fewer cores saturate
every CPU, so no worker runs flat out, the main thread waits for a core, and the GPU starves.
Expected data_cpu, not contention: the CPU goes to the job's own loader (inside its process
tree), and contention is reserved for CPU taken by others."""
import os

import common
import emugpu

GPUS = 1
EXPECT = {0: "data_cpu"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "large", 200, 1024, 768)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    workers = 4 * (os.cpu_count() or 2)
    loader = common.Loader(common.Images(files, blur=2), batch_size=8, workers=workers)
    common.train(gpu, loader, args.seconds, step_seconds=0.02, host_seconds=0.005)


if __name__ == "__main__":
    main()
