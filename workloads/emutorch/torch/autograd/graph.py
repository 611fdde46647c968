"""torch/autograd/graph.py: where the calling thread waits while the engine's device thread
runs the backward pass (the innermost Python frame of a thread in loss.backward())."""

from .. import _C


def _engine_run_backward(t_outputs, *args, **kwargs):
    return _C._run_backward(t_outputs)
