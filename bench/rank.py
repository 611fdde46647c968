#!/usr/bin/env python3
"""A process shaped like a PyTorch training rank, for benchmarks and live tests.

Usage: bench/rank.py [--threads 128] [--workers 8] [--worker-threads 4] [--main-busy 0.0]
                     [--cuda DIR]

Starts --threads - 1 extra threads (intra-op pool, autograd, NCCL, pin-memory stand-ins) that
wake every 100 ms, and --workers data-loader worker processes forked from the main thread
(named pt_data_worker, as PyTorch names them), each with --worker-threads threads of its own. With --main-busy F the main thread spins F of
every 100 ms (a launch loop); otherwise it sleeps. With --cuda DIR the rank maps DIR/libcuda.so.1
(the workspace's stub driver, under the real name) as a PyTorch rank maps the driver, and its
main thread calls it every 100 ms: 100 kernel launches and a stream sync (no context: each
call fails at once, as the real driver's do, after its entry point was hit). Prints "ready" on
stdout once every thread and worker is up, then runs until killed (SIGTERM or SIGKILL; workers
die with it).
"""
import argparse
import ctypes
import os
import signal
import sys
import threading
import time


def nap_forever():
    while True:
        time.sleep(0.1)


def idle_threads(count):
    for _ in range(count):
        threading.Thread(target=nap_forever, daemon=True).start()


def worker(threads):
    # Named as the DataLoader names its workers; die with the rank, as they do (they watch
    # their parent).
    ctypes.CDLL(None).prctl(15, b"pt_data_worker", 0, 0, 0)  # PR_SET_NAME
    parent = os.getppid()
    idle_threads(threads - 1)
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--worker-threads", type=int, default=4)
    parser.add_argument("--main-busy", type=float, default=0.0)
    parser.add_argument("--cuda", help="directory holding libcuda.so.1 to map and call")
    args = parser.parse_args()
    driver = ctypes.CDLL(os.path.join(args.cuda, "libcuda.so.1")) if args.cuda else None
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    workers = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            worker(args.worker_threads)
        workers.append(pid)
    idle_threads(args.threads - 1)
    # Wait until the threads exist, so a benchmark measures the full shape from its start.
    while threading.active_count() < args.threads:
        time.sleep(0.01)
    print("ready", flush=True)
    while True:
        if driver:
            for _ in range(100):
                driver.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None)
            driver.cuStreamSynchronize(None)
        if args.main_busy > 0:
            end = time.monotonic() + 0.1 * args.main_busy
            while time.monotonic() < end:
                pass
            time.sleep(0.1 * (1 - args.main_busy))
        else:
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
