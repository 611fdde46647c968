"""torch.distributed: the process group API the loops use (collectives, point-to-point), from distributed_c10d.py as in
PyTorch, and FSDP (torch.distributed.fsdp)."""

from .distributed_c10d import (  # noqa: F401
    P2POp,
    ReduceOp,
    all_gather_into_tensor,
    all_reduce,
    all_to_all_single,
    barrier,
    batch_isend_irecv,
    broadcast,
    destroy_process_group,
    get_rank,
    get_world_size,
    init_process_group,
    irecv,
    is_available,
    is_initialized,
    isend,
    recv,
    reduce_scatter_tensor,
    send,
)

from . import fsdp  # noqa: E402, F401
