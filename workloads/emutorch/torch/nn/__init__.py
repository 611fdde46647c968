"""torch.nn: only what the loops use (parallel.DistributedDataParallel)."""

from . import parallel  # noqa: F401
