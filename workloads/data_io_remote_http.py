"""A data set streamed over HTTP from a storage host behind a rate-limited link: the store
runs in a network namespace of its own, the training loop in a pod's namespace, joined by a
veth pair whose store side sends at most 32 Mbit/s (htb). Each sample is a 96x96 JPEG padded
to 160 kB (a high-resolution image's size), so two loader workers wait on their sockets for
the link while the GPU starves: data_io from a remote source, the job's ingress named."""
import os
import sys
import urllib.request

import common
import data_io_remote_store
import emugpu
import netpath

GPUS = 1
EXPECT = {0: "data_io"}
# What the verdict must name: the job's own namespace receiving the data.
EXPECT_DETAIL = {0: "the job's network namespace (eth0) received"}
SKIP = netpath.missing_for_namespaces
SAMPLE_BYTES = 160_000
PORT = 8080


class StreamedImages(common.Images):
    """Sample i fetched from the storage host, then decoded and augmented."""

    def read(self, i):
        url = f"http://{netpath.STORE_ADDRESS}:{PORT}/{i}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    link = netpath.Link(rate="32mbit")
    netpath.on_exit(link.remove)
    # The storage host, in its namespace: nobody's child, not one of the loop's workers.
    data_io_remote_store.detached("data_io_remote_http.py", "--serve", link.store, args.data, str(args.seconds + 10))
    # The loop and its workers (forked later) live in the pod's namespace.
    netpath.setns(link.pod)
    netpath.wait_for(netpath.STORE_ADDRESS, PORT)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    loader = common.Loader(StreamedImages(files), batch_size=8, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.03, item_every=10)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        netpath.setns(sys.argv[2])
        files = common.dataset(sys.argv[3], "small", 2000, 96, 96)
        blobs = data_io_remote_store.blobs_of(os.path.dirname(files[0]), SAMPLE_BYTES)
        data_io_remote_store.serve(blobs, netpath.STORE_ADDRESS, PORT, 0.0, float(sys.argv[4]))
    else:
        main()
