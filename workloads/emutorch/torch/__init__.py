"""The emulated torch: the few parts of PyTorch's API the workload loops use, laid out as
PyTorch lays them out (torch/_tensor.py, torch/autograd/graph.py, torch/cuda/__init__.py), over a
C extension (`torch._C`, _C.c: the ATen stand-in) that calls the workspace's stub CUDA runtime
and driver as ATen calls the real ones. What a profiler, py-spy or a uprobe sees of a loop
written against it is what it would see of the same loop on real PyTorch: the job's own line
as the innermost Python frame of a wait, the thread inside libcuda, the backward pass on the
engine's thread `pt_autograd_0`.

The loops put `workloads/emutorch` first on sys.path only when they run emulated
(common.import_torch); with --real they import the real torch. _C is compiled once per change of
its source (gcc and Python's headers), into target/emutorch or $EMUTORCH_BUILD.
"""

from . import _build

__path__.append(_build.ensure_built())
_build.load_cuda()

from . import _C  # noqa: E402
from ._tensor import Tensor  # noqa: E402

_C._set_tensor_class(Tensor)

from . import autograd, cuda, distributed, nn  # noqa: E402, F401

# Functions that are C in PyTorch are C here too: the tensor's own methods.
isnan = Tensor.isnan
isinf = Tensor.isinf
nonzero = Tensor.nonzero


def empty(nbytes, pin_memory=False):
    """A host tensor of `nbytes` (a batch as the loader collates it)."""
    return Tensor(nbytes, pin_memory=pin_memory)


def device(spec):
    return spec
