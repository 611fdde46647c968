"""torch.autograd: backward() hands the graph to the engine (torch/autograd/graph.py)."""

from .graph import _engine_run_backward


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    _engine_run_backward(tensors, grad_tensors, retain_graph, create_graph, inputs, allow_unreachable=True)
