"""torch/distributed/fsdp/fully_sharded_data_parallel.py: FullyShardedDataParallel (FSDP1).
Its units' parameters are sharded across the ranks: before a unit's forward its parameters are
all-gathered (from the forward pre-hook, on the calling thread), in backward all-gathered again
and its gradients reduce-scattered (from autograd hooks, on the engine's thread). Each
collective enqueues and returns, as NCCL does. Its `forward` is the model's compute under a
frame of torch/distributed/: a frame that is not a collective. Its first forward's all-gather
is the process group's first collective, where its communicator is created."""

from ... import _C


class FullyShardedDataParallel:
    def __init__(self, module, units=4, parameter_bytes=400 << 20, **kwargs):
        self.module = module
        _C._fsdp(units, int(parameter_bytes // units))

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        _C._nccl_connect()
        return self.module(*args, **kwargs)
