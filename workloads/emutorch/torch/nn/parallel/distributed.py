"""torch/nn/parallel/distributed.py: DistributedDataParallel. The reducer buckets the
gradients (bucket_cap_mb, 25 MB by default) and all-reduces each bucket from its autograd hook,
on the engine's thread, as soon as the bucket's gradients are ready: overlapped with the rest
of backward, never a host wait. Its constructor broadcasts rank 0's parameters
(torch.distributed.utils' `_sync_module_states`): the process group's first collective, where
its communicator is created."""

import math

from ... import _C
from ...distributed.utils import _sync_module_states


class DistributedDataParallel:
    def __init__(self, module, device_ids=None, bucket_cap_mb=25, gradient_bytes=100 << 20, **kwargs):
        self.module = module
        # Sync params and buffers: every rank starts from rank 0's.
        _sync_module_states(self.module, gradient_bytes, src=0)
        buckets = max(1, math.ceil(gradient_bytes / (bucket_cap_mb * (1 << 20))))
        _C._ddp(buckets, int(gradient_bytes // buckets))

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
