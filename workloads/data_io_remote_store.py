"""A data set fetched sample by sample from an object store over TCP, 25 ms a request and no
local disk involved: two loader workers sleep on their sockets while the GPU waits, and the loop
calls loss.item() every step, as many do. The store runs on loopback in a process of its own
(adopted by init, as a storage host is nobody's child)."""
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import common
import emugpu

GPUS = 1
EXPECT = {0: "data_io"}
LATENCY = 0.025

def serve(blobs, address, port, latency, seconds, port_file=None):
    """An object store: GET /<i> answers sample i's bytes after `latency` seconds, on
    (address, port) (port 0: any, written to `port_file`), for `seconds`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(latency)
            body = blobs[int(self.path.strip("/")) % len(blobs)]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer((address, port), Handler)
    if port_file:
        with open(port_file + ".tmp", "w") as f:
            f.write(str(server.server_address[1]))
        os.rename(port_file + ".tmp", port_file)
    threading.Timer(seconds, server.shutdown).start()
    server.serve_forever()


def blobs_of(directory, size=0):
    """The data set's JPEGs as bytes, each padded to `size` (bytes after a JPEG's end marker
    are ignored by the decoder)."""
    names = sorted(f for f in os.listdir(directory) if f.endswith(".jpg"))
    blobs = [open(os.path.join(directory, n), "rb").read() for n in names]
    return [b + bytes(max(0, size - len(b))) for b in blobs]


def detached(*arguments):
    """Runs this directory's `arguments[0]` script with the rest as a process init adopts (a
    shell that exits at once starts it: a storage host is nobody's child), in the caller's
    process group so that the runner stops it too."""
    command = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), arguments[0]), *arguments[1:]]
    quoted = " ".join("'" + part.replace("'", "'\\''") + "'" for part in command)
    subprocess.run(["sh", "-c", f"nohup {quoted} >/dev/null 2>&1 &"], check=True)


def start_store(directory, seconds, latency=LATENCY):
    """The store, as a process init adopts (a shell that exits at once starts it), answering
    each request after `latency` seconds; its port."""
    port_file = os.path.join(tempfile.mkdtemp(prefix="store-"), "port")
    detached("data_io_remote_store.py", "--serve", directory, str(latency), port_file, str(seconds))
    deadline = time.monotonic() + 30
    while not os.path.exists(port_file):
        if time.monotonic() > deadline:
            raise RuntimeError("the store did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return int(f.read())


class RemoteImages(common.Images):
    """Sample i is fetched from the store (one request a sample), decoded and augmented."""

    def __init__(self, port, count):
        super().__init__([None] * count)
        self.url = f"http://127.0.0.1:{port}/"

    def read(self, i):
        with urllib.request.urlopen(f"{self.url}{i}", timeout=30) as response:
            return response.read()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    port = start_store(os.path.dirname(files[0]), args.seconds + 30)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu)
    loader = common.Loader(RemoteImages(port, len(files)), batch_size=8, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.03, item_every=1)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--serve":
        directory, latency, port_file, seconds = sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
        serve(blobs_of(directory), "127.0.0.1", 0, latency, seconds, port_file)
    else:
        main()
