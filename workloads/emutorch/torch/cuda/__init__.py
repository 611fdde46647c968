"""torch.cuda: device selection and the named syncs (Python functions in PyTorch too)."""

import os

from .. import _C

_initialized = False


def is_available():
    return True


def device_count():
    return int(os.environ.get("EMUGPU_COUNT", "8"))


def set_device(device):
    """Makes `device` (an int or "cuda:N") current for this thread's CUDA calls."""
    global _initialized
    index = int(str(device).split(":")[-1]) if not isinstance(device, int) else device
    _C._cuda_init(index)
    _initialized = True


def _lazy_init():
    if not _initialized:
        set_device(0)


def synchronize(device=None):
    """Waits for every kernel of the current device (cudaDeviceSynchronize)."""
    _lazy_init()
    return _C._cuda_synchronize()
