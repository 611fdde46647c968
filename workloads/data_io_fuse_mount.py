"""A data set read from a network filesystem's stand-in: a FUSE mount that answers every read
after 20 ms (a remote filesystem's round trip), the local disk behind it idle. Two loader
workers wait in the filesystem while the GPU starves: data_io from a remote source, the mount
named."""
import os
import tempfile

import common
import emugpu
import netpath

GPUS = 1
EXPECT = {0: "data_io"}
EXPECT_DETAIL = {0: "fuse.slowfs at "}
SKIP = netpath.missing_for_fuse
LATENCY = 0.02


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    mount_point = tempfile.mkdtemp(prefix="slowfs-")
    mount = netpath.SlowMount(os.path.dirname(files[0]), mount_point, LATENCY)
    netpath.on_exit(mount.remove)
    remote = [os.path.join(mount_point, os.path.basename(f)) for f in files]
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    loader = common.Loader(common.Images(remote), batch_size=16, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.03, item_every=10)


if __name__ == "__main__":
    main()
