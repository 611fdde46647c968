"""torch/distributed/utils.py: what DistributedDataParallel's constructor calls to start every
rank from rank 0's parameters. `_sync_module_states` gathers the module's states and
`_sync_params_and_buffers` broadcasts them with `dist._broadcast_coalesced` (C++, no Python
frame below): the process group's first collective, where its communicator is created, so a
rank waiting for a late peer there sits in this file's frame, as in PyTorch."""

from .. import _C


def _sync_module_states(module, parameter_bytes, src=0):
    """Every rank starts from rank `src`'s parameters and buffers (here their size only)."""
    _sync_params_and_buffers(parameter_bytes, src)


def _sync_params_and_buffers(parameter_bytes, src=0):
    """The broadcast from `src`, enqueued: `dist._broadcast_coalesced` (the communicator first,
    if it is not yet: ranks but 0 wait in the store for rank 0's unique id, rank 0 in
    ncclCommInitRank for the others)."""
    if parameter_bytes > 0:
        _C._nccl_connect()
        _C._nccl_collective(4, int(parameter_bytes))
