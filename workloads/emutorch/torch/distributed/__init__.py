"""torch.distributed: the process group API the loops use, from distributed_c10d.py as in
PyTorch, and FSDP (torch.distributed.fsdp)."""

from .distributed_c10d import (  # noqa: F401
    ReduceOp,
    all_gather_into_tensor,
    all_reduce,
    barrier,
    broadcast,
    destroy_process_group,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
    reduce_scatter_tensor,
)

from . import fsdp  # noqa: E402, F401
