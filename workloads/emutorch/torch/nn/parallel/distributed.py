"""torch/nn/parallel/distributed.py: DistributedDataParallel. The reducer buckets the
gradients (bucket_cap_mb, 25 MB by default) and all-reduces each bucket from its autograd hook,
on the engine's thread, as soon as the bucket's gradients are ready: overlapped with the rest
of backward, never a host wait. Its constructor broadcasts rank 0's parameters
(`_sync_module_states`): the process group's first collective, where its communicator is
created."""

import math

from ... import _C


class DistributedDataParallel:
    def __init__(self, module, device_ids=None, bucket_cap_mb=25, gradient_bytes=100 << 20, **kwargs):
        self.module = module
        self._sync_module_states(gradient_bytes)
        buckets = max(1, math.ceil(gradient_bytes / (bucket_cap_mb * (1 << 20))))
        _C._ddp(buckets, int(gradient_bytes // buckets))

    def _sync_module_states(self, parameter_bytes):
        """Every rank starts from rank 0's parameters: a broadcast, enqueued."""
        _C._nccl_connect()
        _C._nccl_collective(4, int(parameter_bytes))

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
