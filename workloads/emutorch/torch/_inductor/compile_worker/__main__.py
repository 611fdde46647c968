"""Stand-in for torch.compile's (inductor's) compile sidecar, at the path real PyTorch starts it
from (`python torch/_inductor/compile_worker/__main__.py --workers=N --parent=PID`): it forks a
pool of N workers, and all of them idle between compiles, as they do once a model is compiled.
Every one of them leaves when the training process does."""

import argparse
import os
import time


def idle(parent):
    while os.getppid() != 1 and os.path.exists(f"/proc/{parent}"):
        time.sleep(0.5)
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--parent", type=int, required=True)
    args, _ = parser.parse_known_args()
    for _ in range(args.workers):
        if os.fork() == 0:
            idle(args.parent)
    idle(args.parent)


if __name__ == "__main__":
    main()
